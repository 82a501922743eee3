"""GPUs on this machine and how they are linked (NVML), with peer-access capabilities.

Example:
    >>> import pkit
    >>> [g.name for g in pkit.devices()]            # doctest: +SKIP
    ['NVIDIA H200', 'NVIDIA H200']
    >>> pkit.topology().link_labels()               # doctest: +SKIP
    [['X', 'NV18'], ['NV18', 'X']]
"""
from __future__ import annotations

import html
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import pandas as pd

from .errors import PkitError


@dataclass(frozen=True)
class GPUInfo:
    """One CUDA device as this process sees it (CUDA ordinal, after CUDA_VISIBLE_DEVICES)."""

    index: int
    name: str
    compute_capability: str
    sms: int
    memory_bytes: int
    l2_bytes: int
    pci_bus_id: str


@lru_cache(maxsize=1)
def _gpus() -> tuple[GPUInfo, ...]:
    try:
        import cupy as cp

        count = cp.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - no CuPy, no driver or no device all mean: no GPU
        return ()
    out = []
    for i in range(count):
        p = cp.cuda.runtime.getDeviceProperties(i)
        name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
        out.append(GPUInfo(i, name, f"{p['major']}.{p['minor']}", int(p["multiProcessorCount"]),
                           int(p["totalGlobalMem"]), int(p["l2CacheSize"]),
                           cp.cuda.runtime.deviceGetPCIBusId(i)))
    return tuple(out)


def devices() -> list[GPUInfo]:
    """The CUDA GPUs visible to this process; an empty list on a machine without one."""
    return list(_gpus())


def require_gpus(ids: Sequence[int]) -> None:
    """Raise a clear error unless every id in `ids` is a visible GPU."""
    n = len(_gpus())
    bad = [i for i in ids if not isinstance(i, int) or not 0 <= i < n]
    if bad or not ids:
        raise PkitError(f"devices: expected GPU ids in [0, {n}), got {list(ids)}; this machine has "
                        f"{n} GPU{'s' if n != 1 else ''}" + ("" if n else " (run in replay mode, or on a GPU machine)"))


def driver_version() -> str | None:
    nvml = _nvml()
    if nvml is None:
        return None
    v = nvml.nvmlSystemGetDriverVersion()
    return v.decode() if isinstance(v, bytes) else v


@lru_cache(maxsize=1)
def _nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # noqa: BLE001 - NVML absent: topology falls back to CUDA's answers
        return None


def _bus_key(bus_id) -> tuple[int, int, str]:
    """Normalise '0000:18:00.0' (CUDA) and '00000000:18:00.0' (NVML) to one key."""
    text = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)
    domain, bus, devfn = text.lower().split(":")
    return int(domain, 16), int(bus, 16), devfn


_ANCESTOR = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


@dataclass(frozen=True)
class Topology:
    """Pairwise links among the GPUs: NVLink counts, PCIe path labels, P2P and P2P-atomic support."""

    names: tuple[str, ...]
    nvlinks: tuple[tuple[int, ...], ...]
    pcie_path: tuple[tuple[str, ...], ...]
    p2p: tuple[tuple[bool, ...], ...]
    p2p_atomics: tuple[tuple[bool, ...], ...]

    @property
    def size(self) -> int:
        return len(self.names)

    def nvlink_counts(self) -> list[list[int]]:
        return [list(r) for r in self.nvlinks]

    def link_labels(self) -> list[list[str]]:
        """nvidia-smi-style matrix: 'X' on the diagonal, 'NV18' for 18 NVLinks, else the PCIe path."""
        return [["X" if i == j else (f"NV{self.nvlinks[i][j]}" if self.nvlinks[i][j] else self.pcie_path[i][j])
                 for j in range(self.size)] for i in range(self.size)]

    def to_frame(self) -> pd.DataFrame:
        """One row per ordered GPU pair: link label, NVLink count, P2P and P2P-atomics support."""
        labels = self.link_labels()
        return pd.DataFrame([{"src": i, "dst": j, "link": labels[i][j], "nvlinks": self.nvlinks[i][j],
                              "p2p": self.p2p[i][j], "p2p_atomics": self.p2p_atomics[i][j]}
                             for i in range(self.size) for j in range(self.size) if i != j])

    def __str__(self) -> str:
        labels = self.link_labels()
        head = "      " + "".join(f"GPU{j:<5d}" for j in range(self.size))
        rows = [f"GPU{i:<3d}" + "".join(f"{labels[i][j]:<8s}" for j in range(self.size)) for i in range(self.size)]
        return "\n".join([head, *rows])

    def _repr_html_(self) -> str:
        labels = self.link_labels()
        cells = "".join(
            "<tr><th>GPU{0} {1}</th>{2}</tr>".format(
                i, html.escape(self.names[i]),
                "".join(f"<td title='P2P {'yes' if self.p2p[i][j] else 'no'}, atomics "
                        f"{'yes' if self.p2p_atomics[i][j] else 'no'}'>{labels[i][j]}</td>" for j in range(self.size)))
            for i in range(self.size))
        head = "".join(f"<th>GPU{j}</th>" for j in range(self.size))
        return f"<table><tr><th></th>{head}</tr>{cells}</table>"


def topology() -> Topology:
    """Links among all visible GPUs (NVML where available, CUDA peer queries otherwise)."""
    gpus = _gpus()
    if not gpus:
        raise PkitError("topology: this machine has no GPU")
    import cupy as cp

    n, nvml = len(gpus), _nvml()
    nvlinks = [[0] * n for _ in range(n)]
    path = [["X" if i == j else "?" for j in range(n)] for i in range(n)]
    p2p = [[i != j and bool(cp.cuda.runtime.deviceCanAccessPeer(i, j)) for j in range(n)] for i in range(n)]
    atomics = [[False] * n for _ in range(n)]
    if nvml is not None:
        handles = [nvml.nvmlDeviceGetHandleByPciBusId(g.pci_bus_id.encode()) for g in gpus]
        for i in range(n):
            for j in range(n):
                if i == j:
                    continue
                level = nvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])
                path[i][j] = _ANCESTOR.get(int(level), str(level))
                ok = nvml.NVML_P2P_STATUS_OK
                atomics[i][j] = nvml.nvmlDeviceGetP2PStatus(handles[i], handles[j],
                                                            nvml.NVML_P2P_CAPS_INDEX_ATOMICS) == ok
                if nvml.nvmlDeviceGetP2PStatus(handles[i], handles[j], nvml.NVML_P2P_CAPS_INDEX_NVLINK) == ok:
                    nvlinks[i][j] = _nvlinks_between(nvml, handles[i], gpus[j].pci_bus_id)
    return Topology(tuple(g.name for g in gpus), tuple(map(tuple, nvlinks)), tuple(map(tuple, path)),
                    tuple(map(tuple, p2p)), tuple(map(tuple, atomics)))


def _nvlinks_between(nvml, handle, peer_bus_id: str) -> int:
    """Active links from `handle` straight to the peer; through NVSwitch, all active links (as nvidia-smi)."""
    direct, switched = 0, 0
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                continue
            remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId
        except nvml.NVMLError:
            continue
        if _bus_key(remote) == _bus_key(peer_bus_id):
            direct += 1
        else:
            switched += 1
    return direct or switched


def on_device(device: int, thunk):
    """`thunk()` run with GPU `device` current (CuPy), its result returned."""
    import cupy as cp

    with cp.cuda.Device(device):
        return thunk()


@contextmanager
def torch_stream(device: int):
    """torch work inside the block goes to GPU `device`'s current CuPy stream, where pkit ops and `pkit.bench`
    enqueue, so both order and time together."""
    import cupy as cp
    import torch

    with cp.cuda.Device(device):
        with torch.cuda.device(device), torch.cuda.stream(_torch_handle(device, cp.cuda.get_current_stream().ptr)):
            yield


class _StreamPointer:
    """A CUDA stream handle as the CUDA stream protocol hands it over (`__cuda_stream__`: version 0, the handle)."""

    def __init__(self, pointer: int):
        self.pointer = pointer

    def __cuda_stream__(self):
        return 0, self.pointer


def cupy_stream(pointer: int, device: int):
    """A CuPy stream on the CUDA stream `pointer` (a handle someone else made, e.g. torch) of GPU `device`."""
    import cupy as cp

    with cp.cuda.Device(device):
        return cp.cuda.Stream.from_external(_StreamPointer(pointer))


@lru_cache(maxsize=64)
def _torch_handle(device: int, pointer: int):
    """torch's handle on a CuPy stream, made once per stream."""
    import torch

    return torch.cuda.ExternalStream(pointer, device=device)
