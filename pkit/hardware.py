"""Datasheet figures of NVIDIA data-centre GPUs, each with its source.

Values are per GPU, SXM parts, dense (no sparsity): NVIDIA quotes tensor rates with 2:4 sparsity, twice
the dense rate. FP32 is the non-tensor rate. NVLink is the total bidirectional bandwidth per GPU as NVIDIA
quotes it (one direction is half). Network is the per-GPU scale-out NIC of the matching DGX system. These
are vendor figures, not measurements: pkit's measured numbers live in `results/`.

Example:
    >>> from pkit.hardware import GPUS, trend
    >>> GPUS["B200"].bf16_dense_tflops / GPUS["A100"].bf16_dense_tflops
    7.211538461538462
    >>> float(trend().loc["B200", "nvlink_x"])
    3.0
    >>> GPUS["H200"].dense_tflops["tfloat32"]
    494.7
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
