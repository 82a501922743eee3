"""A model of the overlap schedules: each one's time for AG+GEMM, GEMM+RS and GEMM+AR at any shape and world size.

The model is built from measurements where there are some and says where it assumes:

* **GEMM** (`GemmFit`, `pkit.experiments.overlap.gemm_fit`): where the one-GPU GEMM study
  (results/<machine>/overlap_gemm) recorded the shape, its recorded time; elsewhere a fit to that study: waves of
  work over the SMs (pkit's GEMM: whole waves of the units `pkit.ops.gemm_plans.plan` picks; cuBLAS: its tiles spread
  evenly), a wave costing √((K·s_k)² + e²) (mainloop and epilogue overlapping), plus a per-call constant, fitted by
  least squares on the relative error. On g of the GPU's SMs the same work takes more waves (pkit's GEMM plans
  again): no parameter, checked against the SM-partition study (`partition_check`).
* **Interference** (`Interference`): the GEMM's time grows with the HBM traffic a copy beside it makes,
  ratio = 1 + a·u + b·u² (u in TB/s), fitted to the interference study's copy points
  (results/<machine>/interference_copies). And the copy does not get all it asks for: beside a GEMM it got at most
  the HBM traffic an unthrottled copy reached there (measured at two shapes, interpolated in the GEMM's flops per
  byte), so a link transfer's rate is capped at half of it.
* **Links** (`Link`, `pkit.experiments.overlap.links`): per-GPU one-way rates by mechanism and NCCL's collective times: measured on 2×H200 (the
  recorded mechanisms and collectives studies); for other systems the datasheet's NVLink per GPU times the
  fraction of it that 2×H200 measured (labelled modelled, with the datasheet as source).

Each pattern's schedules are the registry's (`pkit.ops.overlap_patterns`), each described by its own entry: its
`structure` (what overlaps what, one GEMM call or one per chunk, what it moves), its GEMM, its transfer and the SMs
it takes; a schedule without a structure is refused (`describe`), never drawn. Serial costs NCCL's time of the
pattern's collective plus T_gemm; an overlapped schedule moves its bytes (`link_bytes`: the collective's bus bytes,
CollectiveOp's bus factor, or its own) at its transfer's rate while computing, in pieces (chunks, or the GEMM's
waves of tiles where the GEMM moves the bytes itself): where bytes flow in (AG+GEMM) max(T_c, T_l + T_c/pieces),
where they flow out (GEMM+RS/AR) max(T_c + T_l/pieces, T_c/pieces + T_l), with T_c the GEMM's time slowed by the
schedule's HBM traffic, on the SMs it keeps. `predict` returns each term and which inputs were measured. The
overlap bound (`bound_ceilings`) takes measured ceilings where recorded (the GEMM's and HBM's on one H200, the
link's on 2×H200) and the datasheet elsewhere, each named in its origin.

Example:
    >>> from pkit import results
    >>> fit = GemmFit.from_frame(results.load("overlap_gemm", "h200x1").frame, "pkit_gemm")
    >>> fit.time_s(8192, 8192, 8192) == fit.recorded_s(8192, 8192, 8192)  # a recorded shape: its recorded time
    True
    >>> round(fit.rate_on(8192, 8192, 8192, sms=116), 2)  # 2048 units: 16 waves on 132 SMs, 18 on 116
    0.88
    >>> schedules_of("ag_gemm") == PATTERNS["ag_gemm"].names  # the registry's schedules, each described
    True
    >>> link_bytes("gemm_ar", "serial", 8192, 1024, 8192, gpus=8) / 2**20  # 2(W−1)/W of 128 MiB: CollectiveOp's factor
    224.0
    >>> link_bytes("gemm_ar", "tma_add", 8192, 1024, 8192, gpus=8) / 2**20  # every tile to its 7 other owners
    896.0
    >>> bump = Interference(a=0.05, b=0.02)
    >>> round(bump.time_ratio(800.0), 4), round(bump.time_ratio(0.0), 4)
    (1.0528, 1.0)
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from ...ops.collective_ops import bus_bandwidth_factor
from ...ops.overlap import CHUNK_ROWS
from ...ops.overlap_patterns import PATTERNS
from ...ops.overlap_patterns import gemm_of
from ...roofline import Ceilings
from .gemm_fit import GemmFit
from .links import Link
from .shapes import DEFAULT_N_LOCALS

PATTERN_NAMES = tuple(PATTERNS)
BF16_BYTES = 2  # the schedules multiply bf16


def waves(m, n, sms: int):
    """Waves of BLOCK_M × BLOCK_N tiles of an M × N output over `sms` SMs, one tile per SM a wave (arrays work)."""
    from ...ops.gemm_plans import BLOCK_M, BLOCK_N

    if np.any(np.asarray(sms) < 1):
        raise ValueError(f"sms: expected at least 1 SM, got {sms}")
    return np.ceil(np.ceil(np.asarray(m) / BLOCK_M) * np.ceil(np.asarray(n) / BLOCK_N) / sms)


@dataclass(frozen=True)
class Interference:
    """A GEMM beside traffic: time ratio 1 + a·u + b·u² at u TB/s of HBM traffic from a copy."""

    a: float
    b: float
    points: tuple = ()  # (GB/s of traffic, measured time ratio)
    budget: tuple = ()  # (GEMM flops per byte, GB/s of HBM traffic an unthrottled copy got beside it), measured

    def copy_budget(self, m: int, n: int, k: int) -> float:
        """GB/s of HBM traffic a copy gets beside this GEMM: measured at the budget's shapes, log-interpolated in
        the GEMM's flops per byte of its operands, held flat beyond them (inf without budget points)."""
        if not self.budget:
            return float("inf")
        x, y = zip(*sorted(self.budget))
        return float(np.exp(np.interp(np.log(intensity(m, n, k)), np.log(x), np.log(y))))

    def time_ratio(self, traffic_GBps: float) -> float:
        u = max(float(traffic_GBps), 0.0) / 1000.0
        return 1.0 + self.a * u + self.b * u * u

    @classmethod
    def from_frame(cls, copies: pd.DataFrame, gemm: str) -> "Interference":
        """Fit `gemm`'s (a, b) to every copies row's time ratio (1 / rate_ratio) against hbm_traffic_GBps (3 points
        at least); the copy budget from the unthrottled copies within the GPU."""
        c = copies[(copies["gemm"] == gemm) & copies["hbm_traffic_GBps"].notna()]
        if len(c) < 3:
            raise ValueError(f"copies: expected at least 3 copy points of {gemm!r}, got {len(c)}")
        u = c["hbm_traffic_GBps"].to_numpy() / 1000.0
        y = 1.0 / c["rate_ratio"].to_numpy() - 1.0
        (a, b), *_ = np.linalg.lstsq(np.column_stack([u, u * u]), y, rcond=None)
        points = tuple((float(x), float(1 / r)) for x, r in zip(c["hbm_traffic_GBps"], c["rate_ratio"]))
        free = c[c["target_GBps"].isna() & ~c["route"].str.contains("CPU")]
        budget = tuple((intensity(m, n, k), float(t)) for m, n, k, t in
                       zip(free["m"], free["n"], free["k"], free["hbm_traffic_GBps"]))
        return cls(float(a), float(b), points, budget)

    def errors(self) -> pd.DataFrame:
        """Each fitted point: traffic_GBps, measured and model time ratio, error (model / measured − 1)."""
        rows = [{"traffic_GBps": x, "measured": y, "model": self.time_ratio(x)} for x, y in self.points]
        out = pd.DataFrame(rows, columns=["traffic_GBps", "measured", "model"])
        return out.assign(error=out["model"] / out["measured"] - 1)


def partition_check(partition: pd.DataFrame, gemms: dict) -> pd.DataFrame:
    """The SM-partition study's idle rows against the wave count's prediction (`GemmFit.rate_on`, nothing fitted to
    these points): gemm, sms_given, gemm_sms, measured (rate on the SMs left over the all-SM rate), model, error."""
    idle = partition[(partition["copy"] == "idle") & partition["gemm"].isin(list(gemms))]
    model = [gemms[g].rate_on(m, n, k, s) for g, m, n, k, s in
             zip(idle["gemm"], idle["m"], idle["n"], idle["k"], idle["gemm_sms"])]
    out = idle[["gemm", "sms_given", "gemm_sms"]].assign(measured=idle["rate_ratio"].to_numpy(), model=model)
    return out.assign(error=out["model"] / out["measured"] - 1).reset_index(drop=True)


def intensity(m: int, n: int, k: int) -> float:
    """A bf16 GEMM's flops per byte of its operands and output (2·M·N·K over 2·(M·K + N·K + M·N))."""
    return m * n * k / (m * k + n * k + m * n)


def calibration_errors(gemms: dict, interference: dict, partition: pd.DataFrame) -> pd.DataFrame:
    """Every one-GPU point the model meets, beside the model: the GEMM fits' shapes and the interference fits'
    copies (both fitted), and the SM-partition study (predicted by the wave count, not fitted). Columns: part, gemm,
    fitted, point, measured, model, error (model / measured − 1; times for the GEMM, time ratios for interference,
    rate ratios for the partition)."""
    gemm_rows = [f.errors().assign(part="gemm time (us)", gemm=g, fitted=True,
                                   point=lambda e: [f"{m}×{n}×{k}" for m, n, k in zip(e["m"], e["n"], e["k"])])
                 .rename(columns={"measured_us": "measured", "model_us": "model"}) for g, f in gemms.items()]
    copy_rows = [f.errors().assign(part="time ratio beside a copy", gemm=g, fitted=True,
                                   point=lambda e: [f"{x:.0f} GB/s" for x in e["traffic_GBps"]])
                 for g, f in interference.items()]
    sms = partition_check(partition, gemms)
    sms = sms.assign(part="rate on the SMs left", fitted=False, point=[f"{s} SMs" for s in sms["gemm_sms"]])
    columns = ["part", "gemm", "fitted", "point", "measured", "model", "error"]
    return pd.concat([frame[columns] for frame in [*gemm_rows, *copy_rows, sms]], ignore_index=True)


def calibrate(gemm: pd.DataFrame, copies: pd.DataFrame, names: Sequence[str]) -> tuple[dict, dict]:
    """({name: GemmFit}, {name: Interference}) for each GEMM implementation in `names` (in that order; the
    schedules' GEMMs, `gemm_of`, among them), fitted to a recorded gemm study (overlap_gemm) and interference
    study's copies (interference_copies). The SM-partition study checks the GEMM fits (`partition_check`)."""
    missing = {gemm_of(s) for p in PATTERN_NAMES for s in PATTERNS[p].names} - set(names)
    if missing:
        raise ValueError(f"names: expected every GEMM the schedules run, missing {sorted(missing)}")
    return ({g: GemmFit.from_frame(gemm, g) for g in names},
            {g: Interference.from_frame(copies, g) for g in names})


def describe(pattern: str, schedule: str):
    """`schedule`'s registry entry (pkit.ops.overlap_patterns) as `pattern` runs it, if the model can describe it: a
    `structure`, and for one that overlaps, a transfer the links have a rate for; else a ValueError saying why."""
    if pattern not in PATTERNS:
        raise ValueError(f"pattern: expected one of {list(PATTERNS)}, got {pattern!r}")
    entry = PATTERNS[pattern].schedule(schedule)
    if entry.structure is None:
        raise ValueError(f"schedule: expected one whose registry entry describes its structure (Structure, "
                         f"pkit.ops.overlap_patterns), got {schedule!r} of {pattern}, which has none: the model "
                         "cannot draw it")
    if entry.structure.overlap != "none" and entry.transfer not in Link.TRANSFERS:
        raise ValueError(f"schedule: expected one moving its bytes by {list(Link.TRANSFERS)}, got {schedule!r} of "
                         f"{pattern}, which moves them by {entry.transfer!r}: the model has no rate for it")
    return entry


def schedules_of(pattern: str) -> tuple[str, ...]:
    """`pattern`'s schedules, the registry's, each one the model describes (`describe` refuses the others)."""
    if pattern not in PATTERNS:
        raise ValueError(f"pattern: expected one of {list(PATTERNS)}, got {pattern!r}")
    return tuple(describe(pattern, s).name for s in PATTERNS[pattern].names)


def collective_bytes(pattern: str, m: int, k: int, n: int) -> float:
    """S of `pattern`'s collective (nccl-tests' size, bytes): the gathered operand (M × K) where bytes flow in, the
    summed output (M × N) where they flow out."""
    return float(m * (k if PATTERNS[pattern].flow == "in" else n) * BF16_BYTES)


def link_bytes(pattern: str, schedule: str, m: int, k: int, n: int, gpus: int) -> float:
    """Bytes each GPU moves over its link (one way) in one call of `schedule`, from its structure's `moves`."""
    from ...ops.gemm_plans import BLOCK_N

    entry, moves = PATTERNS[pattern], describe(pattern, schedule).structure.moves
    total = collective_bytes(pattern, m, k, n)
    if moves == "collective":
        return bus_bandwidth_factor(entry.nccl_op, gpus) * total
    if moves == "rows_per_column_tile":
        return total * (gpus - 1) / gpus * np.ceil(n / BLOCK_N)
    elsewhere = (gpus - 1) / gpus if entry.op_options.get("scatter") else gpus - 1  # owners of a tile but this GPU
    return total * elsewhere


def _gemm_shape(pattern: str, m: int, k: int, n: int, gpus: int) -> tuple[int, int, int]:
    """Each GPU's GEMM (M, N, K): all M rows by its N_local (n) where bytes flow in; its K/W slice of K (k total)
    where they flow out."""
    return (m, n, k) if PATTERNS[pattern].flow == "in" else (m, n, k // gpus)


def predict(pattern: str, schedule: str, m: int, k: int, n: int, link: Link, gemm: GemmFit,
            interference: Interference, comm_sms: int = 16, chunk_rows: int = CHUNK_ROWS) -> dict:
    """One schedule's modelled time per call, from its registry structure (`describe`), with its terms: gemm_us
    (alone), link_us (its bytes, `link_bytes`, at its transfer's rate; NCCL's time for the collective of one that
    does not overlap), slowdown (the GEMM's time ratio beside that traffic, on the SMs it keeps, and as one call or
    one per chunk), fill_us, time_us; and what was measured and what assumed (`inputs`).

    Overlapping schedules pipeline `pieces`: chunks (`chunk_rows` rows each) or the GEMM's waves of tiles (fused).
    Where bytes flow in: max(T_c, T_l + T_c/pieces) (its own rows first, the last piece's GEMM after it lands);
    where they flow out: max(T_c + T_l/pieces, T_c/pieces + T_l) (each piece computed, then sent)."""
    entry = describe(pattern, schedule)
    shape, gpus = entry.structure, link.gpus
    sms = gemm.sms - comm_sms if entry.sms_option else gemm.sms
    gm, gn, gk = _gemm_shape(pattern, m, k, n, gpus)
    t_gemm = gemm.time_s(gm, gn, gk)
    moved = link_bytes(pattern, schedule, m, k, n, gpus)
    if shape.overlap == "none":
        t_link = link.nccl_s(PATTERNS[pattern].nccl_op, collective_bytes(pattern, m, k, n), gpus)
        slow, fill, time = 1.0, 0.0, t_gemm + t_link
    else:
        rate = link.rate(entry.transfer, comm_sms)
        rate = min(rate, interference.copy_budget(gm, gn, gk) / shape.hbm_per_link_byte)  # what HBM serves beside it
        t_link = moved / (rate * 1e9)
        if shape.gemm_calls == "per_chunk":
            alone = gemm.time_s(min(chunk_rows, gm), gn, gk, sms) * max(1, gm // chunk_rows)
        else:
            alone = gemm.time_s(gm, gn, gk, sms)
        slow = interference.time_ratio(shape.hbm_per_link_byte * rate) * alone / t_gemm
        compute = t_gemm * slow
        if shape.overlap == "chunks":
            pieces = max(1, gm // chunk_rows)
        else:
            pieces = int(waves(gm, gn, sms))
        if PATTERNS[pattern].flow == "in":
            time = max(compute, t_link + compute / pieces)
        else:
            time = max(compute + t_link / pieces, compute / pieces + t_link)
        fill = time - max(compute, t_link)
    inputs = {"gemm": f"measured one-GPU {gemm.implementation} rates, fitted",
              "interference": "measured on one GPU, fitted", "link": link.source,
              "link_measured": link.measured}
    return {"pattern": pattern, "schedule": schedule, "gpus": gpus, "m": m, "k": k, "n": n,
            "comm_sms": comm_sms if entry.sms_option else 0, "gemm_us": t_gemm * 1e6, "link_bytes": moved,
            "link_us": t_link * 1e6, "slowdown": slow, "fill_us": fill * 1e6, "time_us": time * 1e6,
            "system": link.name, "measured_link": link.measured, "inputs": inputs}


def bound_ceilings(link: Link, gemm=None, hbm=None) -> Ceilings:
    """The ceilings of the overlap bound on `link`'s system, each with its source: the fastest verified GEMM of a
    recorded one-GPU GEMM study (`gemm`: overlap_gemm's `Recorded`) and HBM's read + write rate of a recorded local
    copy-engine copy (`hbm`: hierarchy_matrix's `Recorded`, its device_local_copy row) where given, else `link.gpu`'s
    datasheet; the link's own ceiling (`link.ceiling_GBps`: measured on 2×H200, the datasheet elsewhere, or the
    emulated rate)."""
    sheet = Ceilings.datasheet(link.gpu)
    flops, flops_from = sheet.flops_per_s, f"GEMM {sheet.flops_per_s / 1e12:.0f} TFLOP/s ({link.gpu} datasheet)"
    if gemm is not None:
        rows = gemm.frame[gemm.frame["verified"].astype(bool)]
        flops = float(rows["tflops"].max()) * 1e12
        flops_from = (f"GEMM {flops / 1e12:.0f} TFLOP/s (results/{gemm.provenance.get('machine')}/overlap_gemm, "
                      "fastest verified)")
    rate, hbm_from = sheet.hbm_bytes_per_s, f"HBM {sheet.hbm_bytes_per_s / 1e12:.1f} TB/s ({link.gpu} datasheet)"
    if hbm is not None:
        local = hbm.frame[hbm.frame["testcase"] == "device_local_copy"]
        if local.empty:
            raise ValueError("hbm: expected a hierarchy_matrix record with a device_local_copy row, got none")
        rate = float(local["bandwidth_GBps"].iloc[0]) * 1e9
        hbm_from = (f"HBM {rate / 1e12:.2f} TB/s read + write (results/{hbm.provenance.get('machine')}/"
                    "hierarchy_matrix, device_local_copy)")
    origin = f"{flops_from}; {hbm_from}; link {link.ceiling_GBps:.0f} GB/s ({link.ceiling_source})"
    return Ceilings(flops, rate, link.ceiling_GBps * 1e9, origin)


def recorded_ceilings(link: Link, machine: str = "h200x1", root=None) -> Ceilings:
    """`bound_ceilings` from `machine`'s recorded overlap_gemm and hierarchy_matrix (each where recorded)."""
    from ... import results

    gemm, hbm = (results.load(e, machine, root=root) if results.is_recorded(e, machine, root=root) else None
                 for e in ("overlap_gemm", "hierarchy_matrix"))
    return bound_ceilings(link, gemm, hbm)


INNER = DEFAULT_N_LOCALS
"""The swept sizes of `curves`: the overlap sweep's N_local and K_local."""


def shape_of(pattern: str, inner: int, gpus: int, m: int = 8192, k: int = 8192, n: int = 8192) -> tuple[int, int, int]:
    """(m, k, n) of `predict` for the overlap sweep's point `inner`: N_local where bytes flow in (K = `k`), K_local
    where they flow out (k = K_local × GPUs, N = `n`)."""
    return (m, k, inner) if PATTERNS[pattern].flow == "in" else (m, inner * gpus, n)


def curves(link: Link, gemms: dict, interference: dict, inner: Sequence[int] = INNER, m: int = 8192, k: int = 8192,
           patterns: Sequence[str] = PATTERN_NAMES, ceilings: Ceilings | None = None) -> pd.DataFrame:
    """`predict` for every pattern and each of its schedules (`schedules_of`) over `inner` (`shape_of`), with the
    overlap bound of each shape under `ceilings` (default `bound_ceilings(link)`: datasheet GEMM and HBM, the link's
    ceiling) and the fraction of it each schedule reaches. `gemms`/`interference`: by implementation
    (`calibrate`), each schedule's as its registry entry says. Columns also: bound_term (the bound's largest term)
    and bound_origin (the ceilings' sources)."""
    from ...roofline import floor

    ceilings = ceilings or bound_ceilings(link)
    rows = []
    for pattern in patterns:
        for x in inner:
            mm, kk, nn = shape_of(pattern, x, link.gpus, m, k)
            bound = floor(PATTERNS[pattern].cost(mm, kk, nn, link.gpus), ceilings, "bfloat16")
            for schedule in schedules_of(pattern):
                impl = gemm_of(schedule)
                row = predict(pattern, schedule, mm, kk, nn, link, gemms[impl], interference[impl])
                row.pop("inputs")
                rows.append({**row, "inner": x, "bound_us": bound.time_s * 1e6, "bound_term": bound.bound,
                             "fraction_of_bound": bound.time_s * 1e6 / row["time_us"],
                             "bound_origin": ceilings.origin})
    return pd.DataFrame(rows)


def beside_measured(predicted: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """Measured overlap points (overlap.sweep rows: pattern, schedule, gpus, m, k, n, time_median_us) with the
    model's time for the same pattern, schedule and shape, and error (model / measured − 1)."""
    key = ["pattern", "schedule", "gpus", "m", "k", "n"]
    merged = measured.merge(predicted[key + ["time_us"]], on=key, how="inner")
    return merged.assign(model_us=merged["time_us"],
                         error=merged["time_us"] / merged["time_median_us"] - 1).drop(columns="time_us")


def serial_check(link: Link, gemm: GemmFit, gemm_frame: pd.DataFrame, m: int = 8192, k: int = 8192) -> pd.DataFrame:
    """The serial AG+GEMM schedule's modelled time against the sum of the recorded pieces it is made of: NCCL's
    all-gather of M×K bf16 (the link's recorded NCCL times, log-log between the recorded sizes around it) plus the
    recorded GEMM (overlap_gemm, the same implementation) at every recorded N_local with this M and K;
    error = model / sum − 1. At a shape the GEMM study recorded the model's GEMM is the recorded one
    (`GemmFit.time_s`), so the error says whether the schedule adds up its pieces; the fit's own error is
    `GemmFit.errors`'."""
    t_nccl = link.nccl_s("all_gather", m * k * BF16_BYTES, link.gpus) * 1e6
    rows = []
    shapes = gemm_frame[(gemm_frame["implementation"] == gemm.implementation) & (gemm_frame["m"] == m)
                        & (gemm_frame["k"] == k)]
    for _, g in shapes.iterrows():
        model = predict("ag_gemm", "serial", m, k, int(g["n"]), link, gemm,
                        Interference(0.0, 0.0))["time_us"]
        summed = t_nccl + float(g["time_median_us"])
        rows.append({"n": int(g["n"]), "nccl_us": t_nccl, "gemm_us": float(g["time_median_us"]),
                     "recorded_sum_us": summed, "model_us": model, "error": model / summed - 1})
    return pd.DataFrame(rows)


def partition_traffic(partition: pd.DataFrame) -> pd.DataFrame:
    """The partition rows with a copy running, as the copies rows read: the GEMM's rate beside the copy over its
    rate on the same SMs idle (`rate_ratio` rescaled), against the HBM traffic the copy made. Columns: gemm, engine,
    sms_given, hbm_traffic_GBps, rate_ratio."""
    idle = partition[partition["copy"] == "idle"].set_index(["gemm", "m", "n", "k", "sms_given"])["rate_ratio"]
    running = partition[partition["copy"] != "idle"]
    ratio = [r / idle[(g, m, n, k, s)] for r, g, m, n, k, s in
             zip(running["rate_ratio"], running["gemm"], running["m"], running["n"], running["k"], running["sms_given"])]
    return running.assign(rate_ratio=ratio)[["gemm", "engine", "sms_given", "hbm_traffic_GBps", "rate_ratio"]]


def fused_problems(root=None) -> dict:
    """Each problem that names its overlap pattern (its META["pattern"], a key of PATTERNS) → (that pattern, its
    module), by folder name in sorted order, under `root` (default: the repository's problems/)."""
    from pathlib import Path

    from ...harness.problem import load_module
    from ...harness.problems import default_root

    found = {}
    for path in sorted((Path(root) if root else default_root()).glob("*/problem.py")):
        module = load_module(path, f"pkit_problem_{path.parent.name}")
        if module.META.get("pattern") is not None:
            found[path.parent.name] = (module.META["pattern"], module)
    return found


def scaled_gemm(gemm: GemmFit, gpu: str, measured_on: str = "H200") -> GemmFit:
    """`gemm`'s fit (measured on `measured_on`) as modelled on `gpu`: the mainloop at the datasheets' dense bf16
    ratio, the epilogue and split units' extra at their HBM ratio, the per-call constant, the waves and their growth
    as measured (assumed: the same kernel, plans and efficiency on the other GPU); no recorded time carries over."""
    from ...hardware import GPUS

    if gpu not in GPUS:
        raise ValueError(f"gpu: expected one of {list(GPUS)}, got {gpu!r}")
    math = GPUS[measured_on].bf16_dense_tflops / GPUS[gpu].bf16_dense_tflops
    memory = GPUS[measured_on].hbm_tbps / GPUS[gpu].hbm_tbps
    return dataclasses.replace(gemm, implementation=f"{gemm.implementation} scaled to {gpu}",
                               seconds_per_k=gemm.seconds_per_k * math, epilogue_s=gemm.epilogue_s * memory,
                               split_s=gemm.split_s * memory, points=())


def _problem_shape(pattern: str, sizes: dict, gpus: int) -> tuple[int, int, int] | None:
    """(m, k, n) of `predict` for one fused problem's size (its `pattern`) at `gpus` GPUs, None where the GPUs do
    not divide it."""
    tokens, inner, outer = sizes["tokens"], sizes["in_features"], sizes["out_features"]
    if pattern == "ag_gemm":
        return (tokens, inner, outer // gpus) if tokens % gpus == 0 and outer % (8 * gpus) == 0 else None
    return (tokens, inner, outer) if inner % gpus == 0 and tokens % gpus == 0 else None


def project_fused(links: Sequence[Link], gemms: dict, interference: dict, size: str = "large",
                  problems_root=None) -> pd.DataFrame:
    """Each fused problem (`fused_problems`: those naming their overlap pattern) at `size` on each of `links`' systems: every schedule's modelled time,
    the overlap bound of its shape (pkit.roofline, the system GPU's datasheet) and the best overlapped schedule's
    speedup over serial NCCL + cuBLAS. GEMMs on a GPU other than the one measured are `scaled_gemm` (assumed).
    Rows: problem, pattern, system, gpus, measured_link, schedule, time_us, bound_us, fraction_of_bound,
    speedup_vs_serial; modelled throughout."""
    from ...roofline import floor

    rows = []
    for problem, (pattern, module) in fused_problems(problems_root).items():
        for link in links:
            shape = _problem_shape(pattern, module.SIZES[size], link.gpus)
            if shape is None:
                continue
            m, k, n = shape
            scale = (lambda g: g) if link.gpu == "H200" else (lambda g: scaled_gemm(g, link.gpu))
            fits = {i: scale(g) for i, g in gemms.items()}
            bound = floor(PATTERNS[pattern].cost(m, k, n, link.gpus), Ceilings.datasheet(link.gpu), "bfloat16").time_s * 1e6
            times = {}
            for schedule in schedules_of(pattern):
                impl = gemm_of(schedule)
                times[schedule] = predict(pattern, schedule, m, k, n, link, fits[impl], interference[impl])["time_us"]
            for schedule, t in times.items():
                rows.append({"problem": problem, "pattern": pattern, "system": link.name, "gpus": link.gpus,
                             "measured_link": link.measured, "schedule": schedule, "time_us": t, "bound_us": bound,
                             "fraction_of_bound": bound / t, "speedup_vs_serial": times["serial"] / t})
    return pd.DataFrame(rows)
