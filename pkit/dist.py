"""pkit's collectives on torch tensors, one process per GPU under torch.distributed: what a solution or a training
script calls in place of torch.distributed's all_reduce, all_gather_into_tensor, reduce_scatter_tensor and
all_to_all_single.

Each function returns a new tensor and leaves its input alone; shares split dimension 0, as torch's do. CUDA
tensors run pkit's kernels on torch's current stream, with the mechanism pkit's `choose` picks for one process
per GPU: LL packets for small messages (pkit/kernels/ll_collectives.cu: input and output used where they lie, no
barrier), else the staged kernels (pkit/kernels/staged_collectives.cu: the input copied into this rank's half of a
symmetric staging buffer, one team barrier, the output pulled from the peers' staging). CPU tensors run the same
collective through torch.distributed (gloo), so code written against pkit.dist runs unchanged on a CPU machine, with
the same bits: a CPU reduction gathers the parts it sums and adds them as the kernels do.

Reductions sum float32 or bfloat16 (in fp32, in rank order, rounded once, so every rank gets the same bits, on any
number of ranks); moves take any dtype.
Every rank must make the same calls in the same order with the same shapes, as with torch.distributed.

Example (under torchrun, one process per GPU, after `dist.init_process_group("nccl")`):
    >>> import torch; from pkit import dist as pdist                                           # doctest: +SKIP
    >>> x = torch.randn(1 << 20, device="cuda", dtype=torch.bfloat16)                          # doctest: +SKIP
    >>> torch.equal(pdist.all_reduce(x), pdist.all_reduce(x))                                  # doctest: +SKIP
    True
"""
from __future__ import annotations

import math
from functools import lru_cache

import torch
import torch.distributed as tdist

from .kernel_args import KernelArgs
from .launch import THREADS
from .ops.collectives import REDUCIBLE as COLLECTIVE_TYPES

REDUCIBLE = {getattr(torch, name): ctype for name, ctype in COLLECTIVE_TYPES.items()}  # torch dtype -> C++ type
STAGED_CALL = KernelArgs("StagedCall", (("x", "ptr"), ("y", "ptr"), ("stage", "ptr"), ("half16", "u64"),
                                        ("share16", "u64"), ("flags", "ptr"), ("state", "ptr"), ("rank", "i32"),
                                        ("size", "i32")))
REDUCING = ("all_reduce", "all_reduce_two_shot", "reduce_scatter")  # kernels templated on the summed type
STAGED_KERNELS = ("staged_all_gather", "staged_all_to_all",
                  *(f"staged_{op}<{c}>" for op in REDUCING for c in REDUCIBLE.values()))


def all_reduce(x: torch.Tensor, group=None) -> torch.Tensor:
    """The elementwise sum of every rank's `x` (same shape and dtype on every rank)."""
    _check(x, "x", reduces=True)
    if not x.is_cuda:
        parts = x.new_empty((tdist.get_world_size(group) * x.numel(),))
        tdist.all_gather_into_tensor(parts, x.contiguous().reshape(-1), group=group)
        return _sum_in_rank_order(parts, tdist.get_world_size(group)).view(x.shape)
    return _context(group).run("all_reduce", x, x.numel(), x.shape)


def all_gather(x: torch.Tensor, group=None) -> torch.Tensor:
    """Every rank's `x` concatenated along dimension 0, in rank order: shape (size · x.shape[0], ...)."""
    _check(x, "x", reduces=False)
    size = tdist.get_world_size(group)
    shape = (size * x.shape[0], *x.shape[1:]) if x.dim() else (size,)
    if not x.is_cuda:
        y = x.new_empty(shape)
        tdist.all_gather_into_tensor(y, x.contiguous(), group=group)
        return y
    return _context(group).run("all_gather", x, x.numel(), shape)


def reduce_scatter(x: torch.Tensor, group=None) -> torch.Tensor:
    """Share `rank` (along dimension 0) of the sum of every rank's `x`: shape (x.shape[0] / size, ...)."""
    _check(x, "x", reduces=True)
    size = _shares(x, group)
    shape = (x.shape[0] // size, *x.shape[1:])
    if not x.is_cuda:
        parts = torch.empty_like(x, memory_format=torch.contiguous_format)  # share `rank` of every rank's x
        tdist.all_to_all_single(parts, x.contiguous(), group=group)
        return _sum_in_rank_order(parts.reshape(-1), size).view(shape)
    return _context(group).run("reduce_scatter", x, x.numel() // size, shape)


def all_to_all(x: torch.Tensor, group=None) -> torch.Tensor:
    """Share q of the result (along dimension 0) is share `rank` of rank q's `x`; same shape as `x`."""
    _check(x, "x", reduces=False)
    size = _shares(x, group)
    if not x.is_cuda:
        y = torch.empty_like(x, memory_format=torch.contiguous_format)
        tdist.all_to_all_single(y, x.contiguous(), group=group)
        return y
    return _context(group).run("all_to_all", x, x.numel() // size, x.shape)


def _sum_in_rank_order(parts: torch.Tensor, size: int) -> torch.Tensor:
    """The sum of the `size` equal blocks of flat `parts` (rank q's part in block q), added in fp32 in rank order and
    rounded once to their dtype, as the kernels add (torch.distributed's own sum takes another order beyond two ranks,
    and rounds bfloat16 at every step)."""
    acc = torch.zeros(parts.numel() // size, dtype=torch.float32)
    for part in parts.view(size, -1):
        acc += part.float()
    return acc.to(parts.dtype)


def _check(x, arg: str, reduces: bool) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{arg}: expected a torch.Tensor, got {type(x).__name__}")
    if reduces and x.dtype not in REDUCIBLE:
        raise ValueError(f"{arg}: pkit.dist reductions sum {sorted(str(d) for d in REDUCIBLE)}, got {x.dtype}")
    if not tdist.is_initialized():
        raise RuntimeError("pkit.dist: torch.distributed is not initialised (call dist.init_process_group first)")


def _shares(x, group) -> int:
    size = tdist.get_world_size(group)
    if x.dim() == 0 or x.shape[0] % size:
        raise ValueError(f"x: expected dimension 0 to split into {size} equal shares, got shape {tuple(x.shape)}")
    return size


class _Context:
    """One process group's pkit Team, LL collectives and staging buffer (grown, never shrunk)."""

    def __init__(self, group):
        from .ops.collectives import Collectives
        from .team import Team

        self.team = Team.from_torch_distributed(group)
        self.device = self.team.devices[self.team.rank]
        self.collectives = Collectives(self.team)
        self.stage = None
        self.half_bytes = 0
        self.epochs = self.team.zeros((2,), "uint32")  # the staged kernels' call epochs (include/pkit/epochs.cuh)

    def run(self, op: str, x: torch.Tensor, share: int, shape) -> torch.Tensor:
        """Collective `op` of `x` whose share is `share` elements (the whole buffer for all_reduce), into a new
        tensor of `shape`."""
        from .ops.collectives import ONE_SHOT_MAX_BYTES, choose

        if x.device.index != self.device:
            raise ValueError(f"x: expected a tensor on this rank's GPU cuda:{self.device}, got {x.device}")
        item, size = x.element_size(), self.team.size
        pad = -share % (16 // math.gcd(16, item))  # elements that make a share whole 16-byte packs
        share_bytes = (share + pad) * item  # also what one rank sends one peer in the one-shot form
        ll = choose(op, share_bytes, "auto", single_process=False) == "ll"
        if op == "all_reduce" and size > 2 and not ll and share_bytes > ONE_SHOT_MAX_BYTES:
            return self._two_shot(x, shape)
        spread = size if op in ("reduce_scatter", "all_to_all") else 1  # shares in x
        xs = _padded(x.contiguous(), share, pad, spread)
        ys = torch.empty((share + pad) * (size if op in ("all_gather", "all_to_all") else 1), dtype=x.dtype,
                         device=x.device)
        with _on_torch_stream(self.device):
            if ll:
                name = f"{op}_ll" + (f"<{REDUCIBLE[x.dtype]}>" if op in REDUCING else "")
                self.collectives._launch_ll(name, _Plain(xs), _Plain(ys), share_bytes // 16)
            else:
                self._staged(op, xs, ys, share_bytes, spread)
        return _unpadded(ys, share, pad).view(shape)

    def _two_shot(self, x: torch.Tensor, shape) -> torch.Tensor:
        """All-reduce as a staged reduce-scatter and all-gather in one kernel: 2(n-1)/n of the buffer on each
        rank's links instead of one-shot's n-1 buffers. The flat input is zero-padded at its end to n shares of
        whole 16-byte packs."""
        size, item, n = self.team.size, x.element_size(), x.numel()
        pack = 16 // math.gcd(16, item)
        share = -(-n // (size * pack)) * pack
        xs = _padded(x.contiguous(), n, share * size - n, 1)
        ys = torch.empty(share * size, dtype=x.dtype, device=x.device)
        with _on_torch_stream(self.device):
            self._staged("all_reduce_two_shot", xs, ys, share * item, size)
        return ys[:n].view(shape)

    def _staged(self, op: str, xs, ys, share_bytes: int, spread: int) -> None:
        """Launch staged kernel `op` over shares of `share_bytes`, `spread` of them in `xs`."""
        self._reserve(share_bytes * spread)
        team, rank = self.team, self.team.rank
        name = f"staged_{op}" + (f"<{REDUCIBLE[xs.dtype]}>" if op in REDUCING else "")
        grid = max(1, min(self.collectives._sms, -(-share_bytes // 16 // THREADS)))
        call = STAGED_CALL.pack(x=xs.data_ptr(), y=ys.data_ptr(), stage=self.stage.table(rank).data.ptr,
                                half16=self.half_bytes // 16, share16=share_bytes // 16,
                                flags=team.barrier_flags.table(rank).data.ptr, state=self.epochs.address(rank),
                                rank=rank, size=team.size)
        _staged_kernel(name)((grid,), (THREADS,), (call,), device=self.device)

    def _reserve(self, nbytes: int) -> None:
        """Staging halves of at least `nbytes`. Growing is collective (every rank grows at the same call); the
        old buffer goes only once every rank's GPU has finished with it."""
        if nbytes <= self.half_bytes:
            return
        if self.stage is not None:
            torch.cuda.synchronize(self.device)  # this rank is done with it; the allocation's barrier waits for all
        self.half_bytes = 1 << max(20, (nbytes - 1).bit_length())
        self.stage = self.team.zeros((2 * self.half_bytes,), "uint8")


class _Plain:
    """A torch tensor where the LL launcher expects a SymmetricArray: only its local address is used."""

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor

    def address(self, rank: int) -> int:
        return self.tensor.data_ptr()


def _padded(x: torch.Tensor, share: int, pad: int, parts: int) -> torch.Tensor:
    """`x` flat, 16-byte aligned in memory, each of its `parts` shares of `share` elements followed by `pad` zeros."""
    flat = x.reshape(-1)
    if pad == 0:
        return flat if flat.data_ptr() % 16 == 0 else flat.clone()  # a fresh allocation is aligned
    return torch.nn.functional.pad(flat.view(parts, share), (0, pad)).view(-1)  # one kernel


def _unpadded(y: torch.Tensor, share: int, pad: int) -> torch.Tensor:
    """The result without the `pad` elements that follow each share of `share` elements."""
    return y if pad == 0 else y.view(-1, share + pad)[:, :share].reshape(-1)


@lru_cache(maxsize=None)
def _staged_module():
    from .compiler import compile_cubin

    return compile_cubin("staged_collectives.cu", name_expressions=STAGED_KERNELS)


@lru_cache(maxsize=None)
def _staged_kernel(name: str):
    from .compiler import Kernel

    return Kernel(_staged_module(), name)


def _on_torch_stream(device: int):
    """CuPy's current stream set to torch's current stream on `device` (pkit launches where torch queues)."""
    return _external_stream(torch.cuda.current_stream(device).cuda_stream, device)


@lru_cache(maxsize=64)
def _external_stream(pointer: int, device: int):
    import cupy as cp

    return cp.cuda.ExternalStream(pointer, device)


_contexts: dict = {}


def _context(group) -> _Context:
    key = id(group) if group is not None else None
    if key not in _contexts:
        _contexts[key] = _Context(group)
    return _contexts[key]
