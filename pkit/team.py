"""`pkit.Team` and `SymmetricArray`: GPUs that address each other's memory, and buffers they share.

A Team is a set of GPUs with peer access enabled among them. `team.empty(shape, dtype)` makes one
allocation per GPU (a SymmetricArray): `arr[r]` is rank r's buffer as a CuPy array, and `arr.table(r)`
is a device array on rank r's GPU holding every rank's address (valid there), for kernels that read or
write peers through `pkit::PeerTable` (include/pkit/peer.cuh).

Two execution models share the same kernels, for any number of ranks from 1 to 8:
  * one process, several GPUs: `Team(team_devices())` (every GPU of the machine) or `Team([0, 1])`; for small
    kernels, ranks may share a GPU (`Team([0] * 4, share_gpus=True)`), each rank on its own stream, each
    kernel's grid within its share of the GPU's SMs (`Team.sms_per_rank`);
  * one process per GPU: `Team.from_torch_distributed()` exchanges CUDA IPC handles over the torch
    process group; this process drives only `team.rank`, and `arr[r]` for another rank is a view of
    that rank's buffer through its IPC mapping on the local GPU.

Example:
    >>> import pkit, numpy as np
    >>> team = pkit.Team([0, 1])                                   # doctest: +SKIP
    >>> x = team.zeros((1024,), "float32")                         # doctest: +SKIP
    >>> x[1][:] = 1; x[0][:] = x[1]  # a peer copy                 # doctest: +SKIP
    >>> team_devices([0, 0], need=2)  # checked before any GPU is touched        # doctest: +ELLIPSIS
    Traceback (most recent call last):
    pkit.errors.PkitError: devices: expected at least 2 distinct GPUs, got [0, 0]; ...
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from .errors import PkitError

_PEER_ALREADY_ENABLED = 704  # cudaErrorPeerAccessAlreadyEnabled
_BARRIER_BLOCKS = 132  # flag slots: one per block that may run a team barrier concurrently


def storage_dtype(dtype) -> tuple[np.dtype, str]:
    """(NumPy storage dtype, logical name). bfloat16, which CuPy lacks, is stored as uint16."""
    if isinstance(dtype, str) and dtype.lower() in ("bfloat16", "bf16"):
        return np.dtype(np.uint16), "bfloat16"
    if str(dtype).startswith("torch."):
        return storage_dtype(str(dtype).removeprefix("torch."))
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise ValueError(f"dtype: expected a NumPy dtype or 'bfloat16', got {dtype!r}") from None
    return dt, dt.name


def team_devices(devices: Sequence[int] | None = None, need: int = 1, arg: str = "devices",
                 what: str = "") -> list[int]:
    """`devices` as a list of GPU ids, None meaning every GPU of this machine (`pkit.devices()`), checked to name
    at least `need` distinct GPUs; else a PkitError naming `arg`, what needs them (`what`, e.g. "(NCCL takes one GPU
    per rank)"), what the machine has, and the fix."""
    from .gpus import devices as visible

    have = len(visible())
    chosen = list(range(have)) if devices is None else list(devices)
    if len(set(chosen)) < need:
        got = f"this machine has {have}" if devices is None else f"got {chosen}"
        plural = "s" if need > 1 else ""
        raise PkitError(f"{arg}: expected at least {need} distinct GPU{plural}{' ' + what if what else ''}, {got}; "
                        f"run on a machine with {need} or more GPUs (this one has {have}), or replay recorded "
                        "results")
    return chosen


def default_team(shared_ranks: int = 2) -> "Team":
    """Every GPU of this machine, one rank each, where there are two or more; else `shared_ranks` ranks sharing GPU 0
    (`Team([0] * shared_ranks, share_gpus=True)`: for correctness checks of small kernels, never for speed)."""
    from .gpus import devices

    return Team(team_devices(need=2)) if len(devices()) >= 2 else Team([0] * shared_ranks, share_gpus=True)


def _dims(dims) -> tuple[int, ...]:
    """A launch's grid or block as a tuple (an int is one dimension)."""
    return (dims,) if isinstance(dims, (int, np.integer)) else tuple(dims)


def _shape(shape) -> tuple[int, ...]:
    shape = _dims(shape)
    if not all(isinstance(s, (int, np.integer)) and s >= 0 for s in shape):
        raise ValueError(f"shape: expected non-negative integers, got {shape!r}")
    return tuple(int(s) for s in shape)


class Team:
    """GPUs with peer access among them; ranks 0..size-1 in the order given.

    `Team([0, 1])` enables peer access both ways (idempotent) or raises naming the pair that cannot.
    """

    def __init__(self, devices: Sequence[int], share_gpus: bool = False):
        import cupy as cp

        from .gpus import on_device, require_gpus

        devices = list(devices)
        if len(set(devices)) != len(devices) and not share_gpus:
            raise ValueError(f"devices: expected distinct GPU ids, got {devices} (ranks that share a GPU, for small "
                             "kernels such as the lesson's checks: Team(devices, share_gpus=True))")
        require_gpus(devices)
        for a in set(devices):
            for b in set(devices) - {a}:
                if not cp.cuda.runtime.deviceCanAccessPeer(a, b):
                    raise PkitError(f"devices: GPU {a} cannot access GPU {b} (no P2P between them); "
                                    "pkit.topology() shows how they are linked")
                with cp.cuda.Device(a):
                    try:
                        cp.cuda.runtime.deviceEnablePeerAccess(b)
                    except cp.cuda.runtime.CUDARuntimeError as e:
                        if e.status != _PEER_ALREADY_ENABLED:
                            raise
        self.devices = tuple(devices)
        self.size = len(devices)
        self.rank: int | None = None  # set when this process drives one rank only
        self.group = None
        self._barrier_flags: SymmetricArray | None = None
        # Ranks sharing a GPU each get their own stream: on one stream a rank waiting for a peer would block the
        # peer's kernel queued behind it. Their kernels run side by side only while all of their blocks fit on
        # the GPU at once, which launch() checks; and every kernel's module must be
        # loaded (kernel.on(device)) before the first rank launches, as loading a module waits for running kernels.
        shared = len(set(devices)) < len(devices)
        self._rank_streams = {r: on_device(d, lambda: cp.cuda.Stream(non_blocking=True))
                              for r, d in enumerate(devices)} if shared else {}

    @property
    def shares_gpus(self) -> bool:
        """True when ranks of this one-process team share a GPU (`Team(..., share_gpus=True)`)."""
        return bool(self._rank_streams)

    def stream(self, rank: int):
        """The CuPy stream rank `rank`'s kernels go to: its own stream when ranks share a GPU, else None (the
        current stream of its GPU)."""
        return self._rank_streams.get(rank)

    def sms_per_rank(self, rank: int) -> int:
        """SMs of rank `rank`'s GPU that its kernels may fill: all of them, or with ranks of this process sharing the
        GPU an equal part (at least 1), so that every sharing rank's grid of that many blocks is resident at once
        (what `launch` requires of them)."""
        from .gpus import devices

        device = self.devices[rank]
        sms = devices()[device].sms
        return max(1, sms // self.devices.count(device)) if self.shares_gpus else sms

    def require_gpu_per_rank(self, what: str) -> None:
        """Raise when ranks share a GPU: `what` needs one GPU per rank (NCCL does)."""
        if self.shares_gpus:
            raise PkitError(f"team: {what} needs one GPU per rank, got ranks sharing GPUs {list(self.devices)}")

    def _require_resident(self, kernel, grid, block, shared_mem: int) -> None:
        """With ranks sharing a GPU, every block of every sharing rank's launch must fit on it at once: a block
        may wait for a peer's block, and a peer's block that cannot start until the waiting one ends never does."""
        from cupy_backends.cuda.api import driver

        from .gpus import devices

        blocks, threads = math.prod(_dims(grid)), math.prod(_dims(block))
        for device in set(self.devices):
            sharing = self.devices.count(device)
            per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.on(device).ptr, threads, shared_mem)
            fits = per_sm * devices()[device].sms
            if blocks * sharing > fits:
                raise PkitError(f"grid: {blocks} blocks per rank × {sharing} ranks sharing GPU {device} exceed the "
                                f"{fits} blocks of {threads} threads it holds at once ({per_sm} per SM); ranks "
                                "sharing a GPU need every block resident, as a block may wait for a peer's: use "
                                "smaller messages, or one GPU per rank")

    @classmethod
    def from_torch_distributed(cls, group=None) -> "Team":
        """One rank per process: this process's GPU is `torch.cuda.current_device()`."""
        import cupy as cp
        import torch
        import torch.distributed as dist

        if not dist.is_initialized():
            raise PkitError("from_torch_distributed: torch.distributed is not initialised "
                            "(call dist.init_process_group first, e.g. under torchrun)")
        team = cls.__new__(cls)
        device = torch.cuda.current_device()
        cp.cuda.Device(device).use()
        team.group = group
        team.rank = dist.get_rank(group)
        team.size = dist.get_world_size(group)
        all_devices: list = [None] * team.size
        dist.all_gather_object(all_devices, device, group=group)
        team.devices = tuple(all_devices)
        team._barrier_flags = None
        team._rank_streams = {}  # one process per rank: processes sharing a GPU are time-sliced by the driver
        return team

    @property
    def local_ranks(self) -> tuple[int, ...]:
        """Ranks whose GPU this process drives."""
        return tuple(range(self.size)) if self.rank is None else (self.rank,)

    def device_of(self, rank: int) -> int:
        return self.devices[rank]

    def empty(self, shape, dtype="float32") -> "SymmetricArray":
        """A SymmetricArray with uninitialised contents."""
        return SymmetricArray(self, _shape(shape), dtype, zero=False)

    def zeros(self, shape, dtype="float32") -> "SymmetricArray":
        """A SymmetricArray filled with zeros on every GPU (visible to all ranks when it returns)."""
        return SymmetricArray(self, _shape(shape), dtype, zero=True)

    @property
    def barrier_flags(self) -> "SymmetricArray":
        """uint32 flags for `pkit::barrier`: row b (size + 1 words) serves block b of a kernel."""
        if self._barrier_flags is None:
            self._barrier_flags = self.zeros((_BARRIER_BLOCKS, self.size + 1), "uint32")
        return self._barrier_flags

    def launch(self, kernel, grid, block, args: Callable[[int], tuple], shared_mem: int = 0) -> None:
        """Launch `kernel` on every local rank's GPU (its `stream(rank)`) with `args(rank)`; with ranks sharing a
        GPU, only a grid whose blocks all fit on it at once (else PkitError)."""
        if self.shares_gpus:
            self._require_resident(kernel, grid, block, shared_mem)
        for r in self.local_ranks:
            kernel(grid, block, args(r), shared_mem=shared_mem, device=self.devices[r], stream=self.stream(r))

    def fork(self, *lanes) -> None:
        """Side streams start after every rank's work so far: each lane (a sequence of CuPy streams, one per rank,
        each on its rank's GPU) waits for what every rank's current stream has enqueued, so the work put on a lane
        next may read any rank's inputs. Nothing blocks the host (`order_streams`)."""
        order_streams(after=self._current_streams("fork"), waiting=self._lane_streams(lanes, "fork"))

    def join(self, *lanes) -> None:
        """Every rank's current stream waits for all the work enqueued so far on each lane (one stream per rank, as
        `fork` takes them): once the current streams go on, what the lanes wrote is in place and what they read may
        be overwritten."""
        order_streams(after=self._lane_streams(lanes, "join"), waiting=self._current_streams("join"))

    def meet(self) -> None:
        """Every rank's current stream waits for what every rank's current stream has enqueued so far: no rank's
        next work starts before any rank's work so far is done."""
        current = self._current_streams("meet")
        order_streams(after=current, waiting=current)

    def _current_streams(self, what: str) -> list[tuple[int, None]]:
        """(GPU, None) per rank: each rank's GPU's current stream, as `order_streams` takes them."""
        if self.rank is not None:
            raise PkitError(f"team: {what} orders the streams of every rank's GPU, which one process drives; this "
                            f"process drives rank {self.rank} only (CUDA events do not cross processes here)")
        return [(d, None) for d in self.devices]

    def _lane_streams(self, lanes, what: str) -> list[tuple[int, object]]:
        """(GPU, stream) for every stream of every lane, each checked to hold one stream per rank."""
        if not lanes:
            raise ValueError(f"lanes: {what} expected at least one lane (a sequence of streams, one per rank)")
        for lane in lanes:
            if len(lane) != self.size:
                raise ValueError(f"lanes: {what} expected one stream per rank ({self.size}), got a lane of "
                                 f"{len(lane)}")
        return [(self.devices[r], stream) for lane in lanes for r, stream in enumerate(lane)]

    def synchronize(self) -> None:
        """Wait for all local GPUs; a trapped device-side wait raises pkit.PeerTimeout."""
        from .launch import synchronize

        synchronize([self.devices[r] for r in self.local_ranks])
        if self.group is not None or self.rank is not None:
            import torch.distributed as dist

            dist.barrier(self.group)

    def __repr__(self) -> str:
        mode = "one process" if self.rank is None else f"rank {self.rank} of a process group"
        mode += ", ranks sharing GPUs" if self.shares_gpus else ""
        return f"Team(devices={list(self.devices)}, {mode})"


def order_streams(*, after, waiting) -> None:
    """Cross-GPU stream order: every stream of `waiting` waits, without blocking the host, for the work enqueued so
    far on every stream of `after` (an event recorded on each stream of `after`, then each waiting stream waits on
    all of them). Each stream is (GPU id, a CuPy stream on that GPU, or None: that GPU's current stream)."""
    import cupy as cp

    from .gpus import on_device

    def record(stream):
        event = cp.cuda.Event(disable_timing=True)
        event.record(stream)  # None: the current stream
        return event

    def wait(stream, events):
        stream = cp.cuda.get_current_stream() if stream is None else stream
        for event in events:
            stream.wait_event(event)

    events = [on_device(device, lambda s=stream: record(s)) for device, stream in after]
    for device, stream in waiting:
        on_device(device, lambda s=stream: wait(s, events))


class SymmetricArray:
    """One same-shaped buffer per team GPU, with per-GPU tables of every rank's address."""

    def __init__(self, team: Team, shape: tuple[int, ...], dtype, zero: bool):
        import cupy as cp

        self.team, self.shape = team, shape
        self.storage_dtype, self.dtype = storage_dtype(dtype)
        self.nbytes = int(math.prod(shape)) * self.storage_dtype.itemsize
        self._memory: dict[int, object] = {}  # rank -> owned or IPC-mapped memory
        self._ipc_opened: list[int] = []
        for r in team.local_ranks:
            with cp.cuda.Device(team.devices[r]):
                mem = cp.cuda.Memory(max(self.nbytes, 1))  # a plain cudaMalloc: IPC needs the allocation base
                if zero:
                    cp.cuda.runtime.memset(mem.ptr, 0, max(self.nbytes, 1))
                self._memory[r] = mem
        if team.rank is None:
            self.addresses = {r: [self._memory[q].ptr for q in range(team.size)] for r in range(team.size)}
        else:
            self.addresses = {team.rank: self._exchange_ipc_handles()}
        self._tables = {}
        for r in team.local_ranks:
            with cp.cuda.Device(team.devices[r]):
                self._tables[r] = cp.asarray(np.array(self.addresses[r], dtype=np.uint64))
                cp.cuda.runtime.deviceSynchronize()
        if team.rank is not None:
            import torch.distributed as dist

            dist.barrier(team.group)  # every rank's zeros are in place before anyone signals into them

    def _exchange_ipc_handles(self) -> list[int]:
        import cupy as cp
        import torch.distributed as dist

        team, rank = self.team, self.team.rank
        handle = cp.cuda.runtime.ipcGetMemHandle(self._memory[rank].ptr)
        handles: list = [None] * team.size
        dist.all_gather_object(handles, handle, group=team.group)
        addresses = []
        with cp.cuda.Device(team.devices[rank]):
            for q, h in enumerate(handles):
                if q == rank:
                    addresses.append(self._memory[rank].ptr)
                else:
                    ptr = cp.cuda.runtime.ipcOpenMemHandle(h, cp.cuda.runtime.cudaIpcMemLazyEnablePeerAccess)
                    self._ipc_opened.append(ptr)
                    addresses.append(ptr)
        return addresses

    def __getitem__(self, rank: int):
        """Rank `rank`'s buffer as a CuPy array (bfloat16 shows as its uint16 storage; see `.torch`)."""
        import cupy as cp

        team = self.team
        if not isinstance(rank, (int, np.integer)) or not 0 <= rank < team.size:
            raise IndexError(f"rank: expected 0 <= rank < {team.size}, got {rank!r}")
        local = rank if team.rank is None else team.rank
        address = self.addresses[local][rank]
        device = team.devices[local]
        mem = cp.cuda.UnownedMemory(address, max(self.nbytes, 1), self, device_id=device)
        return cp.ndarray(self.shape, dtype=self.storage_dtype, memptr=cp.cuda.MemoryPointer(mem, 0))

    def fill(self, value) -> "SymmetricArray":
        """Fill every local rank's buffer with `value` (a scalar of the storage dtype), each on its own GPU."""
        import cupy as cp

        for r in self.team.local_ranks:
            with cp.cuda.Device(self.team.devices[r]):
                self[r].fill(value)
        return self

    @property
    def local(self):
        """This process's own buffer (multi-process teams)."""
        if self.team.rank is None:
            raise PkitError("local: a one-process team drives every rank; index the array by rank instead")
        return self[self.team.rank]

    def address(self, rank: int) -> int:
        """Device address of rank `rank`'s own buffer on its GPU (a rank this process drives)."""
        if rank not in self._memory:
            raise PkitError(f"rank: this process drives ranks {self.team.local_ranks}, not {rank}")
        return self._memory[rank].ptr

    def table(self, rank: int):
        """uint64 device array on rank `rank`'s GPU: entry q is rank q's address as seen from there."""
        if rank not in self._tables:
            raise PkitError(f"rank: this process drives ranks {self.team.local_ranks}, not {rank}")
        return self._tables[rank]

    def torch(self, rank: int):
        """Rank `rank`'s buffer as a torch tensor (zero-copy through DLPack), with the logical dtype."""
        import torch

        t = torch.from_dlpack(self[rank])
        return t.view(torch.bfloat16) if self.dtype == "bfloat16" else t

    def __len__(self) -> int:
        return self.team.size

    def __repr__(self) -> str:
        return f"SymmetricArray(shape={self.shape}, dtype={self.dtype}, team={self.team!r})"

    def __del__(self):
        try:
            import cupy as cp

            for ptr in self._ipc_opened:
                cp.cuda.runtime.ipcCloseMemHandle(ptr)
        except Exception:  # noqa: BLE001 - interpreter shutdown: the driver frees mappings itself
            pass
