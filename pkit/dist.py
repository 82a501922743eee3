"""pkit's collectives on torch tensors, one process per GPU under torch.distributed: a function per op of the
collective registry (pkit/ops/collective_ops.py) whose kernels include the staged family, in place of that op's
torch.distributed call: `all_reduce`, `all_gather` (all_gather_into_tensor), `reduce_scatter`
(reduce_scatter_tensor) and `all_to_all` (all_to_all_single); `run(op, x)` runs any of them by name (OPS).

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
from .ops.collective_ops import COLLECTIVES, REDUCIBLE, CollectiveOp, choose, collective
from .ops.collective_ops import kernel_names, lookup

TORCH_REDUCIBLE = {getattr(torch, name): ctype for name, ctype in REDUCIBLE.items()}  # torch dtype -> C++ type
STAGED_CALL = KernelArgs("StagedCall", (("x", "ptr"), ("y", "ptr"), ("stage", "ptr"), ("half16", "u64"),
                                        ("share16", "u64"), ("flags", "ptr"), ("state", "ptr"), ("rank", "i32"),
                                        ("size", "i32")))
STAGED_KERNELS = kernel_names("staged")  # NVRTC name expressions of staged_collectives.cu
_OPS = {name: op for name, op in COLLECTIVES.items() if "staged" in op.kernels}
OPS = tuple(_OPS)  # the ops pkit.dist runs: a function of each name


def run(op: str, x: torch.Tensor, group=None) -> torch.Tensor:
    """Collective `op` (a name of OPS) of every rank's `x` as a new tensor; dimension 0 splits into the ranks'
    shares where the op's input or output holds one per rank (`CollectiveOp.pieces`)."""
    entry = lookup(_OPS, op, "op")
    _check(x, "x", reduces=entry.reduces)
    size = tdist.get_world_size(group)
    ins, outs = entry.pieces(size)
    if ins > 1:
        _shares(x, size)
    shape = x.shape if ins == outs else ((x.shape[0] if x.dim() else 1) * outs // ins, *x.shape[1:])
    if not x.is_cuda:
        return _on_cpu(entry, x, shape, size, group)
    return _context(group).run(entry, x, x.numel() // ins, shape)


def _function(entry: CollectiveOp):
    """pkit.dist.<op>(x, group=None): `run` of a registered op."""
    def call(x: torch.Tensor, group=None) -> torch.Tensor:
        return run(entry.name, x, group)

    call.__name__ = call.__qualname__ = entry.name
    call.__doc__ = (f"{entry.description}, as a new tensor (`run`; in place of torch.distributed.{entry.torch}; "
                    "shares split dimension 0).")
    return call


globals().update({name: _function(op) for name, op in _OPS.items()})


def _on_cpu(entry: CollectiveOp, x: torch.Tensor, shape, size: int, group) -> torch.Tensor:
    """`entry` on CPU tensors through torch.distributed: a move by its torch call; a reduction gathers the parts it
    sums with its `summands` move and adds them in rank order."""
    if entry.reduces:
        moves = collective(entry.summands)
        ins, outs = moves.pieces(size)
        parts = _on_cpu(moves, x.reshape(-1), (x.numel() * outs // ins,), size, group)
        return _sum_in_rank_order(parts, size).view(shape)
    y = x.new_empty(shape)
    getattr(tdist, entry.torch)(y, x.contiguous(), group=group)
    return y


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
    if reduces and x.dtype not in TORCH_REDUCIBLE:
        raise ValueError(f"{arg}: pkit.dist reductions sum {sorted(str(d) for d in TORCH_REDUCIBLE)}, got {x.dtype}")
    if not tdist.is_initialized():
        raise RuntimeError("pkit.dist: torch.distributed is not initialised (call dist.init_process_group first)")


def _shares(x, size: int) -> None:
    if x.dim() == 0 or x.shape[0] % size:
        raise ValueError(f"x: expected dimension 0 to split into {size} equal shares, got shape {tuple(x.shape)}")


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

    def run(self, entry: CollectiveOp, x: torch.Tensor, piece: int, shape) -> torch.Tensor:
        """Op `entry` of `x` whose piece (what a rank sends each peer) is `piece` elements, into a new tensor of
        `shape`."""
        from .ops.collectives import ONE_SHOT_MAX_BYTES

        if x.device.index != self.device:
            raise ValueError(f"x: expected a tensor on this rank's GPU cuda:{self.device}, got {x.device}")
        item, size = x.element_size(), self.team.size
        pad = -piece % (16 // math.gcd(16, item))  # elements that make a piece whole 16-byte packs
        piece_bytes = (piece + pad) * item
        ll = choose(entry.name, piece_bytes, "auto", single_process=False) == "ll"
        two_shot = "two_shot" in entry.algorithms.get("staged", ())
        if two_shot and size > 2 and not ll and piece_bytes > ONE_SHOT_MAX_BYTES:
            return self._two_shot(entry, x, shape)
        ins, outs = entry.pieces(size)
        xs = _padded(x.contiguous(), piece, pad, ins)
        ys = torch.empty((piece + pad) * outs, dtype=x.dtype, device=x.device)
        ctype = TORCH_REDUCIBLE[x.dtype] if entry.reduces else None
        with _on_torch_stream(self.device):
            if ll:
                self.collectives._launch_ll(entry.kernel("ll", ctype), _Plain(xs), _Plain(ys), piece_bytes // 16)
            else:
                self._staged(entry.kernel("staged", ctype), xs, ys, piece_bytes, ins)
        return _unpadded(ys, piece, pad).view(shape)

    def _two_shot(self, entry: CollectiveOp, x: torch.Tensor, shape) -> torch.Tensor:
        """All-reduce as a staged reduce-scatter and all-gather in one kernel: 2(n-1)/n of the buffer on each
        rank's links instead of one-shot's n-1 buffers. The flat input is zero-padded at its end to n shares of
        whole 16-byte packs."""
        size, item, n = self.team.size, x.element_size(), x.numel()
        pack = 16 // math.gcd(16, item)
        share = -(-n // (size * pack)) * pack
        xs = _padded(x.contiguous(), n, share * size - n, 1)
        ys = torch.empty(share * size, dtype=x.dtype, device=x.device)
        with _on_torch_stream(self.device):
            self._staged(entry.kernel("staged", TORCH_REDUCIBLE[x.dtype], "two_shot"), xs, ys, share * item, size)
        return ys[:n].view(shape)

    def _staged(self, name: str, xs, ys, share_bytes: int, spread: int) -> None:
        """Launch staged kernel `name` (an NVRTC name expression) over shares of `share_bytes`, `spread` of them in
        `xs`."""
        self._reserve(share_bytes * spread)
        team, rank = self.team, self.team.rank
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
    """One CuPy stream per torch stream, made once."""
    from .gpus import cupy_stream

    return cupy_stream(pointer, device)


_contexts: dict = {}


def _context(group) -> _Context:
    key = id(group) if group is not None else None
    if key not in _contexts:
        _contexts[key] = _Context(group)
    return _contexts[key]
