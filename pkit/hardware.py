"""Datasheet figures of NVIDIA data-centre GPUs, each with its source.

Values are per GPU, SXM parts, dense (no sparsity). NVLink is the total bidirectional bandwidth per GPU
as NVIDIA quotes it (one direction is half). Network is the per-GPU scale-out NIC of the matching DGX
system. These are vendor figures, not measurements: pkit's measured numbers live in `results/`.

Example:
    >>> from pkit.hardware import GPUS, trend
    >>> GPUS["B200"].bf16_dense_tflops / GPUS["A100"].bf16_dense_tflops
    7.211538461538462
    >>> float(trend().loc["B200", "nvlink_x"])
    3.0
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

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

    @property
    def nvlink_gbps_per_direction(self) -> float:
        return self.nvlink_gbps_bidir / 2


GPUS: dict[str, GPU] = {
    "A100": GPU("A100", 2020, 312.0, 2.039, 80, 600.0, 200.0, 108, 40,
                "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM: BF16 312 TFLOPS dense, 2,039 GB/s, "
                "NVLink 600 GB/s); DGX A100 datasheet (8x ConnectX-6 200 Gb/s HDR InfiniBand for 8 GPUs)"),
    "H100": GPU("H100", 2022, 989.4, 3.35, 80, 900.0, 400.0, 132, 50,
                "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: BF16 1,979 TFLOPS with sparsity = 989 dense, "
                "3.35 TB/s, NVLink 900 GB/s); DGX H100 datasheet (8x ConnectX-7 400 Gb/s for 8 GPUs)"),
    "H200": GPU("H200", 2024, 989.4, 4.8, 141, 900.0, 400.0, 132, 60,
                "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM: BF16 1,979 TFLOPS with sparsity = 989 dense, "
                "141 GB at 4.8 TB/s, NVLink 900 GB/s); DGX H200 datasheet (8x ConnectX-7 400 Gb/s)"),
    "B200": GPU("B200", 2024, 2250.0, 8.0, 180, 1800.0, 400.0, 148, 126,
                "NVIDIA DGX B200 datasheet (72 PFLOPS FP8 training / 8 GPUs; BF16 dense 2.25 PFLOPS per GPU as in "
                "the HGX B200 specifications, 8 TB/s HBM3e, NVLink 5 1.8 TB/s; 8x ConnectX-7 400 Gb/s)"),
}


def table() -> pd.DataFrame:
    """All datasheet figures, one row per GPU, indexed by name."""
    return pd.DataFrame([asdict(g) for g in GPUS.values()]).set_index("name")


def trend(base: str = "A100") -> pd.DataFrame:
    """Each GPU's compute, HBM, NVLink and network figures as multiples of `base` (columns `*_x`)."""
    if base not in GPUS:
        raise ValueError(f"base: expected one of {list(GPUS)}, got {base!r}")
    t = table()[["year", "bf16_dense_tflops", "hbm_tbps", "nvlink_gbps_bidir", "network_gbitps"]]
    ratios = t.drop(columns="year") / t.loc[base].drop("year")
    ratios.columns = ["compute_x", "hbm_x", "nvlink_x", "network_x"]
    return t.join(ratios)
