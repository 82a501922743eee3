"""Datasheet figures of NVIDIA data-centre GPUs, each with its source.

Values are per GPU, SXM parts, dense (no sparsity): NVIDIA quotes tensor rates with 2:4 sparsity, twice
the dense rate. FP32 is the non-tensor rate. NVLink is the total bidirectional bandwidth per GPU as NVIDIA
quotes it (one direction is half). Network is the per-GPU scale-out NIC of the matching DGX system. These
are vendor figures, not measurements: pkit's measured numbers live in `results/`.

Example:
    >>> from pkit.hardware import GPUS, NICS, SUPERCHIP_GPUS, trend
    >>> GPUS["B200"].bf16_dense_tflops / GPUS["A100"].bf16_dense_tflops
    7.211538461538462
    >>> float(trend().loc["B200", "nvlink_x"])
    3.0
    >>> GPUS["H200"].dense_tflops["tfloat32"]
    494.7
    >>> SUPERCHIP_GPUS["GB200"].nvlink_gbps_per_direction, NICS["ConnectX-7"].gbps_per_direction  # GB/s one way
    (900.0, 50.0)
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from .vocabulary import ROUTE_KINDS

if TYPE_CHECKING:  # pandas is imported by the tables alone: problems import the datasheets on every rank
    import pandas as pd


@dataclass(frozen=True)
class GPU:
    """One GPU's datasheet figures (units in the field names) and where they come from."""

    name: str
    year: int
    bf16_dense_tflops: float
    hbm_tbps: float
    hbm_gb: float
    nvlink_gbps_bidir: float
    network_gbitps: float
    sms: int
    l2_mib: float
    source: str
    fp16_dense_tflops: float  # tensor cores, FP32 accumulate
    tf32_dense_tflops: float  # tensor cores
    fp32_tflops: float  # CUDA cores (no tensor cores)

    @property
    def dense_tflops(self) -> dict[str, float]:
        """Dense matmul rate (TFLOP/s) by input dtype name: bfloat16, float16, tfloat32, float32."""
        return {"bfloat16": self.bf16_dense_tflops, "float16": self.fp16_dense_tflops,
                "tfloat32": self.tf32_dense_tflops, "float32": self.fp32_tflops}

    @property
    def nvlink_gbps_per_direction(self) -> float:
        return self.nvlink_gbps_bidir / 2


GPUS: dict[str, GPU] = {
    "A100": GPU("A100", 2020, 312.0, 2.039, 80, 600.0, 200.0, 108, 40,
                "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM: BF16 and FP16 312 TFLOPS dense, TF32 156 "
                "dense, FP32 19.5 TFLOPS, 2,039 GB/s, NVLink 600 GB/s); DGX A100 datasheet (8x ConnectX-6 200 Gb/s "
                "HDR InfiniBand for 8 GPUs)",
                fp16_dense_tflops=312.0, tf32_dense_tflops=156.0, fp32_tflops=19.5),
    "H100": GPU("H100", 2022, 989.4, 3.35, 80, 900.0, 400.0, 132, 50,
                "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: BF16 and FP16 1,979 TFLOPS with sparsity = 989 "
                "dense, TF32 989 with sparsity, FP32 67 TFLOPS, 3.35 TB/s, NVLink 900 GB/s); NVIDIA H100 Tensor Core "
                "GPU Architecture whitepaper (H100 SXM5 dense: FP16/BF16 Tensor 989.4, TF32 Tensor 494.7, FP32 66.9 "
                "TFLOPS); DGX H100 datasheet (8x ConnectX-7 400 Gb/s for 8 GPUs)",
                fp16_dense_tflops=989.4, tf32_dense_tflops=494.7, fp32_tflops=66.9),
    "H200": GPU("H200", 2024, 989.4, 4.8, 141, 900.0, 400.0, 132, 60,
                "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM: BF16 and FP16 1,979 TFLOPS with sparsity = 989 "
                "dense, TF32 989 with sparsity, FP32 67 TFLOPS, 141 GB at 4.8 TB/s, NVLink 900 GB/s); dense rates to "
                "one decimal from the H100 whitepaper's H100 SXM5 column, the same GH100 chip and clocks (FP16/BF16 "
                "989.4, TF32 494.7, FP32 66.9); DGX H200 datasheet (8x ConnectX-7 400 Gb/s)",
                fp16_dense_tflops=989.4, tf32_dense_tflops=494.7, fp32_tflops=66.9),
    "B200": GPU("B200", 2024, 2250.0, 8.0, 180, 1800.0, 400.0, 148, 126,
                "NVIDIA DGX B200 datasheet (72 PFLOPS FP8 training / 8 GPUs; BF16 dense 2.25 PFLOPS per GPU as in "
                "the HGX B200 specifications, 8 TB/s HBM3e, NVLink 5 1.8 TB/s; 8x ConnectX-7 400 Gb/s); HGX B200 "
                "specifications per GPU (FP16/BF16 Tensor 4.5 PFLOPS and TF32 Tensor 2.2 PFLOPS with sparsity, FP32 "
                "75 TFLOPS)",
                fp16_dense_tflops=2250.0, tf32_dense_tflops=1100.0, fp32_tflops=75.0),
}


SUPERCHIP_GPUS: dict[str, GPU] = {
    "GB200": GPU("GB200", 2024, 2500.0, 8.0, 186, 1800.0, 400.0, 148, 126,
                 "NVIDIA GB200 NVL72 specifications (per 72 GPUs: FP16/BF16 Tensor 360 PFLOPS and TF32 Tensor 180 "
                 "PFLOPS with sparsity = 2,500 and 1,250 TFLOPS dense per GPU, FP32 5,760 TFLOPS = 80 per GPU, up to "
                 "13.4 TB HBM3e = 186 GB per GPU at 576 TB/s = 8 TB/s per GPU, NVLink 130 TB/s = 1.8 TB/s per GPU: "
                 "72 GPUs in one NVLink domain through NVLink Switch trays); NVIDIA multi-node NVLink tuning guide "
                 "(GB200 72x1: 18 compute trays of 4 GPUs with ConnectX-7, 400 Gb/s per GPU); SMs and L2 as the B200 "
                 "entry (the same Blackwell GPU; the NVL72 specifications state neither)",
                 fp16_dense_tflops=2500.0, tf32_dense_tflops=1250.0, fp32_tflops=80.0),
}
"""GPUs sold only on Grace superchips in rack-scale NVLink systems (the NVL72's GPU is rated above the HGX B200's:
2,500 vs 2,250 dense BF16 TFLOPS). Kept out of `GPUS`, the discrete SXM line whose trend notebook 01 plots."""


@dataclass(frozen=True)
class NIC:
    """A scale-out network adapter: line rate of one port in Gb/s, each direction, and where it comes from."""

    name: str
    gbitps: float
    source: str

    @property
    def gbps_per_direction(self) -> float:
        """GB/s each direction (8 bits per byte)."""
        return self.gbitps / 8


NICS: dict[str, NIC] = {
    "ConnectX-6": NIC("ConnectX-6", 200.0, "NVIDIA ConnectX-6 VPI product brief (HDR InfiniBand, 200 Gb/s per port); "
                      "DGX A100 datasheet (8x single-port ConnectX-6 for 8 GPUs)"),
    "ConnectX-7": NIC("ConnectX-7", 400.0, "NVIDIA ConnectX-7 product brief (NDR InfiniBand, up to 400 Gb/s); DGX "
                      "H100, DGX H200 and DGX B200 datasheets (8x ConnectX-7 400 Gb/s for 8 GPUs)"),
    "ConnectX-8": NIC("ConnectX-8", 800.0, "NVIDIA ConnectX-8 SuperNIC product brief (XDR InfiniBand, up to 800 Gb/s); "
                      "DGX B300 datasheet (8x ConnectX-8 800 Gb/s for 8 GPUs)"),
}
"""Per-GPU scale-out NICs of NVIDIA's DGX systems, one NIC per GPU."""


PCIE_GBPS_BIDIR = {"A100": 64.0, "H100": 128.0, "H200": 128.0}
"""Host link per GPU, both directions (GB/s): NVIDIA A100 80GB SXM datasheet (PCIe Gen4: 64 GB/s); H100 SXM and
H200 SXM datasheets (PCIe Gen5: 128 GB/s)."""




def datasheet_of(device_name: str) -> str | None:
    """The key of `GPUS` whose datasheet a GPU of that device name (as NVML or a record's provenance gives it)
    follows, None for a GPU without one here.

    >>> datasheet_of("NVIDIA H100 80GB HBM3"), datasheet_of("NVIDIA H200"), datasheet_of("NVIDIA L4")
    ('H100', 'H200', None)
    """
    words = str(device_name).replace("-", " ").split()
    return next((key for key in GPUS if key in words), None)


def route_ceiling(gpu: str, kind: str) -> tuple[float, str]:
    """The datasheet limit of one copy along a route of `kind` (`pkit.ops.transfers.Route.kind`: 'peer', 'local',
    'h2d', 'd2h') on `gpu`, in GB/s of bytes copied, and a label saying what it is: NVLink one direction between
    two GPUs; half the HBM rate within one GPU (each byte copied is read and written); PCIe one direction to or
    from the host.

    Example:
        >>> route_ceiling("H200", "local")
        (2400.0, 'HBM, half of 4.8 TB/s (a copy reads and writes each byte): 2400 GB/s (H200 datasheet)')
        >>> route_ceiling("H200", "h2d")[0], route_ceiling("H200", "peer")[0]
        (64.0, 450.0)
    """
    if gpu not in GPUS:
        raise ValueError(f"gpu: expected one of {list(GPUS)}, got {gpu!r}")
    if kind not in ROUTE_KINDS:
        raise ValueError(f"kind: expected one of {ROUTE_KINDS}, got {kind!r}")
    sheet = GPUS[gpu]
    if kind in ("h2d", "d2h"):
        if gpu not in PCIE_GBPS_BIDIR:
            raise ValueError(f"gpu: no PCIe datasheet figure for {gpu!r}; known: {list(PCIE_GBPS_BIDIR)}")
        gbps = PCIE_GBPS_BIDIR[gpu] / 2
        return gbps, f"PCIe, one direction: {gbps:.0f} GB/s ({gpu} datasheet)"
    if kind == "local":
        gbps = sheet.hbm_tbps * 1000 / 2
        return gbps, (f"HBM, half of {sheet.hbm_tbps:g} TB/s (a copy reads and writes each byte): {gbps:.0f} GB/s "
                      f"({gpu} datasheet)")
    return sheet.nvlink_gbps_per_direction, (f"NVLink, one direction: {sheet.nvlink_gbps_per_direction:.0f} GB/s "
                                             f"({gpu} datasheet)")


def table() -> pd.DataFrame:
    """All datasheet figures, one row per GPU, indexed by name."""
    import pandas as pd

    return pd.DataFrame([asdict(g) for g in GPUS.values()]).set_index("name")


def trend(base: str = "A100") -> pd.DataFrame:
    """Each GPU's compute, HBM, NVLink and network figures as multiples of `base` (columns `*_x`)."""
    if base not in GPUS:
        raise ValueError(f"base: expected one of {list(GPUS)}, got {base!r}")
    t = table()[["year", "bf16_dense_tflops", "hbm_tbps", "nvlink_gbps_bidir", "network_gbitps"]]
    ratios = t.drop(columns="year") / t.loc[base].drop("year")
    ratios.columns = ["compute_x", "hbm_x", "nvlink_x", "network_x"]
    return t.join(ratios)
