"""Small helpers shared by problem files (`problems/*/problem.py`) and their solutions: seeded inputs, dtypes,
cost records, and pieces several problems compute the same way (sharded linear layers, MoE routing).

Example:
    >>> from pkit.problem_kit import generator, randn, cost
    >>> g = generator(seed=0, rank=1)
    >>> x = randn((4, 8), "bfloat16", g)
    >>> cost(flops=2 * 4 * 8, hbm_bytes=x.numel() * 2, link_bytes=0, sync_steps=1)
    {'flops': 64, 'hbm_bytes': 64, 'link_bytes': 0, 'sync_steps': 1}
"""
from __future__ import annotations

import torch
import torch.distributed as dist

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "float64": torch.float64, "fp64": torch.float64,
    "int64": torch.int64, "int32": torch.int32,
}


def parse_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """A torch dtype from a name such as 'bf16' or 'float32' (or a torch dtype, returned as is)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _DTYPES[str(dtype).lower()]
    except KeyError:
        raise ValueError(f"dtype: expected one of {sorted(_DTYPES)} or a torch.dtype, got {dtype!r}") from None


def generator(seed: int, rank: int) -> torch.Generator:
    """A CPU generator whose stream depends on (seed, rank): every rank draws different, reproducible data."""
    return torch.Generator().manual_seed(int(seed) * 1_000_003 + int(rank))


def randn(shape, dtype, gen: torch.Generator, device="cpu", scale: float = 1.0) -> torch.Tensor:
    """Normal(0, scale²) samples drawn on `device` by a generator there seeded with one draw of `gen` (no host draw
    and copy of a large tensor), so they depend on `gen`'s stream and the kind of device only."""
    local = torch.Generator(device).manual_seed(int(torch.randint(0, 1 << 62, (1,), generator=gen)))
    return (torch.randn(shape, generator=local, device=device, dtype=torch.float32) * scale).to(parse_dtype(dtype))


def cost(flops: float = 0, hbm_bytes: float = 0, link_bytes: float = 0, sync_steps: int = 0) -> dict:
    """A per-GPU cost record: FLOPs, HBM bytes (read + write), bytes each GPU sends over links, and the
    dependent cross-GPU synchronisation rounds of the algorithm those bytes count (docs/problems.md), each of
    which costs `pkit.roofline`'s latency α."""
    if not (isinstance(sync_steps, int) and not isinstance(sync_steps, bool) and sync_steps >= 0):
        raise ValueError(f"sync_steps: expected a count of rounds (an int >= 0), got {sync_steps!r}")
    return {"flops": int(flops), "hbm_bytes": int(hbm_bytes), "link_bytes": int(link_bytes), "sync_steps": sync_steps}


def row_parallel_linear_inputs(size: dict, world_size: int, dtype, gen: torch.Generator, device="cpu"):
    """(x, weight) of one rank of a row-parallel linear layer (Megatron RowParallelLinear), input features split
    over the W ranks. `size` holds tokens, in_features, out_features. x (tokens, in_features/W) ~ N(0, 1), then
    weight (out_features, in_features/W) in nn.Linear layout ~ N(0, 1/in_features), both drawn from `gen`."""
    k = size["in_features"] // world_size
    x = randn((size["tokens"], k), dtype, gen, device)
    weight = randn((size["out_features"], k), dtype, gen, device, scale=size["in_features"] ** -0.5)
    return x, weight


def column_parallel_linear_inputs(size: dict, world_size: int, dtype, gen: torch.Generator, device="cpu"):
    """(x, weight) of one rank of a linear layer whose tokens and output features are split over the W ranks
    (Megatron ColumnParallelLinear under sequence parallelism; FSDP's row shard of the weight). `size` holds
    tokens, in_features, out_features. x (tokens/W, in_features) ~ N(0, 1), then weight (out_features/W,
    in_features) in nn.Linear layout ~ N(0, 1/in_features), both drawn from `gen`."""
    x = randn((size["tokens"] // world_size, size["in_features"]), dtype, gen, device)
    weight = randn((size["out_features"] // world_size, size["in_features"]), dtype, gen, device,
                   scale=size["in_features"] ** -0.5)
    return x, weight


def moe_tokens(size: dict, dtype, gen: torch.Generator, device="cpu"):
    """(x, topk_ids) of one rank of an MoE layer; `size` holds tokens, hidden, num_experts, top_k. Drawn from
    `gen` in this order: topk_ids (tokens, top_k) int64, top_k distinct global experts per token uniformly at
    random, then x (tokens, hidden) ~ N(0, 1)."""
    topk_ids = torch.rand((size["tokens"], size["num_experts"]), generator=gen).topk(size["top_k"], dim=-1).indices
    x = randn((size["tokens"], size["hidden"]), dtype, gen, device)
    return x, topk_ids.to(device)


def moe_exchange_counts(topk_ids: torch.Tensor, num_experts: int):
    """Sort a rank's (token, slot) rows by global expert and swap row counts with every rank (one all-to-all).

    topk_ids (tokens, top_k) int64: global expert ids; rank r owns experts [r*L, (r+1)*L), L = num_experts / W.
    Returns (order, counts, recv_counts): order (tokens*top_k,) the flat (token, slot) indices sorted by expert,
    then (token, slot), so grouped by destination rank; counts (num_experts,) the rows this rank sends to each
    expert; recv_counts (W, L) the rows each source rank sends to each local expert of this rank.
    """
    flat = topk_ids.flatten()
    order = flat.argsort(stable=True)
    counts = torch.bincount(flat, minlength=num_experts)
    recv_counts = torch.empty_like(counts)
    dist.all_to_all_single(recv_counts, counts)
    return order, counts, recv_counts.view(dist.get_world_size(), -1)


def moe_dispatch(x: torch.Tensor, topk_ids: torch.Tensor, num_experts: int):
    """Send each (token, slot) row of x (tokens, hidden) to the owner of expert topk_ids[token, slot] with one
    uneven all-to-all (ownership as in `moe_exchange_counts`).

    Returns (chunks, recv_counts): chunks, W*L tensors (rows, hidden) ordered (source rank, local expert), each
    in the source's (token, slot) order; recv_counts (W, L) int64, the rows of each chunk.
    """
    order, counts, recv_counts = moe_exchange_counts(topk_ids, num_experts)
    send = x[order // topk_ids.shape[1]]
    recv = x.new_empty((int(recv_counts.sum()), x.shape[1]))
    dist.all_to_all_single(recv, send, recv_counts.sum(1).tolist(),
                           counts.view(recv_counts.shape[0], -1).sum(1).tolist())
    return recv.split(recv_counts.flatten().tolist()), recv_counts


def local_expert_rows(all_x: torch.Tensor, all_ids: torch.Tensor, rank: int, local_experts: int):
    """The rows every rank routes to this rank's experts, picked from all ranks' tokens and routing.

    all_x (W, tokens, hidden) and all_ids (W, tokens, top_k) int64 global expert ids; rank r owns the
    `local_experts` experts [r*L, (r+1)*L). Returns (expert, rows): expert (rows,) int64 local expert index and
    rows (rows, hidden), one per (source rank, token, slot) routed here, ordered by local expert, then source
    rank, token, slot.
    """
    local = all_ids - rank * local_experts
    mine = (local >= 0) & (local < local_experts)
    src, token, _ = mine.nonzero(as_tuple=True)  # row-major: (source rank, token, slot) order
    expert = local[mine]
    order = expert.argsort(stable=True)
    return expert[order], all_x[src[order], token[order]]


FLOAT_ONE_BITS = 0x3F800000
"""The bit pattern of 1.0 in float32."""


def distinct_keys(n: int, rank: int, world_size: int, gen: torch.Generator, dtype) -> torch.Tensor:
    """n shuffled keys of a rank, distinct across all ranks: increasing integers with random gaps of 1-15, times W
    plus rank. dtype int64: those integers; float32: the float32 numbers whose bit patterns are the integers
    plus that of 1.0 (positive floats order like their bit patterns, so the floats sort like the integers, and
    they start at 1, not among the denormals, so a float32 tolerance cannot hide a wrong key)."""
    keys = (torch.randint(1, 16, (n,), generator=gen).cumsum(0) * world_size + rank)[torch.randperm(n, generator=gen)]
    if parse_dtype(dtype) == torch.float32:
        bits = keys + FLOAT_ONE_BITS
        if bits.numel() and int(bits.max()) >= 0x7F800000:  # the bit patterns of inf and NaN
            raise ValueError(f"n: {n} keys per rank over {world_size} ranks run past float32's finite range")
        keys = bits.to(torch.int32).view(torch.float32)
    return keys


def transformer_param_shapes(size: dict) -> list[tuple[int, ...]]:
    """Parameter shapes of size["layers"] LLaMA-style decoder layers in order (h = size["hidden"], f = size["ffn"]),
    per layer: attention norm (h,), qkv (3h, h), attention out (h, h), MLP norm (h,), gate+up (2f, h), down (h, f)."""
    h, f = size["hidden"], size["ffn"]
    return [(h,), (3 * h, h), (h, h), (h,), (2 * f, h), (h, f)] * size["layers"]
