"""Overlap study: the tensor-parallel GEMM schedules of pkit.ops.overlap timed side by side over shape sweeps,
each checked against float32, beside PyTorch's (torchrun), with the communication-aware roofline per point.

The patterns and schedules are the registry's (`pkit.ops.overlap_patterns`); the study's code lives in these modules,
whose public names this one gathers:

- `gemm`: `gemm_rates` (pkit's GEMM against cuBLAS on every shape the schedules and fused problems run, bf16
  and FP8), `plan_sweep` (every plan of pkit's GEMM at those shapes), `study_shapes`;
- `sweeps`: `sweep` (AG+GEMM over N_local), `sweep_partial` (GEMM+RS or GEMM+AR over K_local), `torch_sweep`,
  `timeline` (one ce_chunks run), and each study by name: `measure`, `recorded`, `calibration`, `parameters`;
- `checks`: fresh inputs with float32 references (`fill`, `fill_partial`) and `bf16_match`, `check`;
- `analysis`: the tables notebook 05 shows, `with_bounds` (each row against max(T_c, T_l, T_m) + α and the
  serial time), `gemm_gate` (with each shape's roofline under `gemm_ceilings`), `shape_bounds`, `compare`,
  `timeline_summary`; `plots`: the figure `draw` (its other figures, `draw_gate`, `draw_interference`,
  `draw_partition`, `draw_curves`, are its own);
- `interference` (what a copy beside a GEMM costs it on one GPU), `model`, `gemm_fit`, `links` (the overlap model
  and its inputs), `emulated`, `emulated_draw`, `pacing` (one rank of every schedule under an emulated link),
  `pytorch` (PyTorch's schedules under torchrun) and `shapes`: modules of their own, imported by name;
- `cli`: `python -m pkit.experiments.overlap STUDY... [--record]` measures (and records) from a shell.

Example:
    >>> from pkit.experiments import overlap
    >>> "ag_gemm" in overlap.MEASUREMENTS and "torch_ag_gemm" in overlap.MEASUREMENTS  # each pattern, PyTorch's too
    True
    >>> import pkit; frame = overlap.sweep(pkit.Team(pkit.team.team_devices()), n_locals=[1024, 4096])  # doctest: +SKIP
    >>> overlap.with_bounds(frame)                                                                     # doctest: +SKIP
"""
from __future__ import annotations

from .analysis import (GEMM_GATE, SHAPE, TERMS, TORCH_SCHEDULES, compare, gemm_ceilings, gemm_gate, shape_bounds,
                       timeline_summary, with_bounds)
from .checks import bf16_match, check, fill, fill_partial
from .cli import main
from .plots import draw
from .gemm import gemm_rates, plan_sweep, study_shapes
from .sweeps import (DEFAULT_N_LOCALS, GEMM_IMPLEMENTATIONS, MEASUREMENTS, TORCH_PATTERNS, calibration,
                              measure, parameters, recorded, sweep,
                              sweep_partial, timeline, torch_sweep, variants)

__all__ = ["DEFAULT_N_LOCALS", "GEMM_GATE", "GEMM_IMPLEMENTATIONS", "SHAPE", "MEASUREMENTS", "TERMS", "TORCH_PATTERNS",
           "TORCH_SCHEDULES", "bf16_match", "calibration", "check", "compare", "draw", "fill", "fill_partial",
           "gemm_ceilings", "gemm_gate", "gemm_rates", "main", "measure", "parameters", "plan_sweep", "recorded",
           "shape_bounds", "sweep", "study_shapes", "sweep_partial", "timeline", "timeline_summary", "torch_sweep",
           "variants", "with_bounds"]
