"""Overlap on one GPU: one rank of each overlap schedule runs its exact work while its peers' bytes arrive from
stand-in buffers on the same GPU, paced at a link's rate.

A rank of a W-GPU team is emulated on a one-GPU team of W ranks sharing the GPU (`Team([d] * W, share_gpus=True)`):
the schedules of `pkit.ops.overlap` run as they are, only for rank 0 (`op.working`), the other ranks' buffers on
the same GPU standing in for the peers. Where a schedule moves bytes by copy engine (ce_chunks, ce_flags, and the
serial schedules' collective) each copy goes from the stand-in to rank 0's buffer in pieces released at the
link's rate (`pacing.Pacer`): the call is enqueued whole behind a gate in pinned host memory that its streams wait
on, then the host opens the start and each piece when a link of that rate, started with the call, would have
delivered its last byte; what the host spends enqueueing is never timed. Within one GPU the driver may run a copy
as a kernel on the SMs (a real rank's peer copy goes by copy engine), even when asked to keep it beside compute
(`pkit.driver.memcpy_beside_compute`), so `pacing.copies_beside_full_gpu` measures, once per GPU, whether a copy
runs while pkit's GEMM holds every SM, as ce_flags' GEMM does while it waits for the copies' flags: where it does
not, ce_flags is not emulated (it raises rather than trap) and only serial's rows, whose copies run alone, count
as faithful. A real rank's HBM is read for what it sends and written for what it receives; one local copy of the
bytes it receives reads and writes as many, so the emulated traffic matches. Serial is emulated the same way (the
collective's bus bytes, CollectiveOp's factor, at the link rate, then the GEMM), so every speedup over serial is
measured on equal terms.

Schedules whose communication runs on SMs (sm_pull, tma_pull, tma_add) load and store the stand-ins in local HBM,
seeing neither NVLink's latency nor its rate: their rows say `faithful` False, and `comm_GBps` says what rate their
communication reached (link bytes over the schedule's time, a lower bound) against the link's; `link_checks`
measures the paced copy alone (held to its rate), the unpaced local copy (its HBM traffic) and an SM copy on
sm_pull's SMs.

Example:
    >>> link_rate("h200x8")[0], link_rate(300)
    (450.0, (300.0, 'given'))
    >>> emulated(device=0)                                                                  # doctest: +SKIP
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ...ops.collective_ops import bus_bandwidth_factor
from ...ops.overlap import AllGatherGemm, PartialGemm
from ...ops.overlap_patterns import PATTERNS
from . import model as M
from . import links as L
from .pacing import Pacer, copies_beside_full_gpu, memcpy

INNER = M.INNER  # the overlap sweep's N_local (AG+GEMM) and K_local (GEMM+RS/AR)
WORLD_SIZES = (2, 8)
ROUNDS = 3  # timed rounds per point, every schedule once a round, the order reversed every other round
LINK_MACHINE = "h200x2-nv18"  # whose recorded copy-engine rate is the default link
CHECK_BYTES = 256 << 20  # the link checks' copies
EXPERIMENTS = ("overlap_emulated", "overlap_emulated_link")


def link_rate(link, root=None) -> tuple[float, str]:
    """(GB/s one way, its source) of `link`: 'h200x2' (the copy engine's peer rate recorded on 2×H200,
    results/h200x2-nv18/mechanisms_size_sweep), 'h200x8' (the H200 datasheet's NVLink per GPU, one way), 'pcie'
    (the H200 datasheet's PCIe Gen5, one way), or a rate in GB/s ('given')."""
    from ...hardware import GPUS, route_ceiling

    if isinstance(link, (int, float, np.integer, np.floating)) and not isinstance(link, bool) and link > 0:
        return float(link), "given"
    if link == "h200x2":
        two = L.recorded_link(LINK_MACHINE, root=root)
        return two.ce_GBps, two.ceiling_source
    if link == "h200x8":
        sheet = GPUS["H200"]
        return sheet.nvlink_gbps_per_direction, f"NVLink one way per GPU (H200 datasheet: {sheet.source})"
    if link == "pcie":
        return route_ceiling("H200", "h2d")
    raise ValueError(f"link: expected 'h200x2', 'h200x8', 'pcie' or a positive rate in GB/s, got {link!r}")


class _EmulatedGather(AllGatherGemm):
    """AllGatherGemm's rank 0 with its peers standing in: each chunk it receives is a paced local copy from the
    peer's buffer; the serial schedule's all-gather is those chunks, in the same order, on the current stream."""

    def __init__(self, team, pacer: Pacer, **shape):
        super().__init__(team, **shape)
        self.working, self.pacer = (0,), pacer
        self.copies_beside = copies_beside_full_gpu(team.devices[0])["beside"]

    def ce_flags(self) -> None:
        """AllGatherGemm.ce_flags, where the paced copies run beside a GPU full of the GEMM's blocks; else a
        PkitError (the GEMM would wait for flags whose copies wait for its SMs, and trap)."""
        from ...errors import PkitError

        if not self.copies_beside:
            verdict = copies_beside_full_gpu(self.team.devices[0])
            raise PkitError(f"ce_flags: on this GPU a local copy waits for an SM even when asked to run beside compute "
                            f"({verdict}), and ce_flags' GEMM holds every SM until the copies land: it cannot be "
                            "emulated on one GPU here")
        super().ce_flags()

    def _copy_rows(self, rank: int, peer: int, row: int, stream) -> None:
        offset, nbytes = row * self.k * 2, self.chunk_rows * self.k * 2
        self.pacer.copy(self.gathered.address(rank) + offset, self.gathered.address(peer) + offset, nbytes, stream)

    def _collective(self) -> None:
        import cupy as cp

        stream = cp.cuda.get_current_stream()
        for q, row in self._peer_chunks(0):
            self._copy_rows(0, q, row, stream)


class _EmulatedPartial(PartialGemm):
    """PartialGemm's rank 0 with its peers standing in: the serial schedule's collective is its bus bytes
    (CollectiveOp's factor: W − 1 pieces of M/W rows for reduce-scatter, 2(W − 1) for all-reduce), paced local
    copies from the peers' partial products into rank 0's output."""

    def __init__(self, team, pacer: Pacer, **shape):
        super().__init__(team, **shape)
        self.working, self.pacer = (0,), pacer

    def _collective(self) -> None:
        import cupy as cp

        stream, w = cp.cuda.get_current_stream(), self.team.size
        piece = self.m // w * self.n * 2
        steps = round(bus_bandwidth_factor(PATTERNS[self.pattern].nccl_op, w) * w)
        slots = self.out_rows * self.n * 2 // piece
        for i in range(steps):
            src = self.partials.address(1 + i % (w - 1)) + (i % w) * piece
            self.pacer.copy(self.outputs.address(0) + (i % slots) * piece, src, piece, stream)


def _op(pattern: str, team, pacer: Pacer, inner: int):
    """The emulated op of `pattern` at the overlap sweep's point `inner`, inputs random on the GPU."""
    m, k, n = M.shape_of(pattern, inner, team.size)
    if PATTERNS[pattern].flow == "in":
        op = _EmulatedGather(team, pacer, m=m, k=k, n_local=n)
        for r in range(team.size):
            op.shard(r).normal_()
        op.weight(0).normal_()
        return op
    op = _EmulatedPartial(team, pacer, m=m, k_local=k // team.size, n=n, scatter=PATTERNS[pattern].op_options["scatter"])
    for buffer in (op.lhs(0), op.weight(0), *(op.partials.torch(r) for r in range(1, team.size))):
        buffer.normal_()
    return op


def _timed(op, schedule: str, options: dict, pacer: Pacer, device: int, hold: bool = True) -> tuple[float, float]:
    """(ms of one call from an idle GPU, GB/s the paced copies reached in it; NaN where it made none). The whole
    call is enqueued behind the pacer's gate, then released: the host's enqueueing is not timed (`hold=False`, a
    schedule's first call, which may load modules: not held, so its time counts the host's too)."""
    import cupy as cp

    cp.cuda.Device(device).synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    pacer.begin(cp.cuda.get_current_stream(), hold=hold)
    start.record()
    try:
        op.run(schedule, **options)
        end.record()
    finally:
        pacer.release()  # the gate opens even when the call failed to enqueue
    end.synchronize()
    if pacer.forced:
        raise RuntimeError(f"{schedule}: the host held the pacer's gate past its watchdog; the call was not timed")
    ms = cp.cuda.get_elapsed_time(start, end)
    if not pacer.moved:
        return ms, float("nan")
    return ms, pacer.moved / (cp.cuda.get_elapsed_time(pacer.first_reached, pacer.last_end) * 1e-3) / 1e9


def _poison(op) -> None:
    """NaN in rank 0's output and in the rows its peers send it, so a check after the next call sees what it did."""
    import torch

    op.out(0).fill_(float("nan"))
    for q in range(1, op.team.size):
        op._a[0][q * op.shard_rows:(q + 1) * op.shard_rows].fill_(float("nan"))
    torch.cuda.synchronize()


def _check_gather(op) -> tuple[bool, float]:
    """Rank 0's output against the float32 product of every rank's own rows (each in its own buffer) and its
    weight."""
    import torch

    from .checks import bf16_match

    rows = torch.cat([op.shard(q).float() for q in range(op.team.size)])
    return bf16_match(op.out(0), rows @ op.weight(0).float().T, terms=op.k)


def emulated(device: int = 0, links: Sequence = ("h200x2",), world_sizes: Sequence[int] = WORLD_SIZES,
             inner: Sequence[int] = INNER, patterns: Sequence[str] = M.PATTERN_NAMES, rounds: int = ROUNDS,
             root=None) -> pd.DataFrame:
    """Every schedule of each pattern (its registry grid) at the overlap sweep's shapes (`inner`), one rank of
    W = each of `world_sizes` on GPU `device`, peers emulated at each of `links` (`link_rate`). Each point: a
    warm-up call (AG+GEMM's output checked against float32), then `rounds` rounds timing every schedule once from
    an idle GPU, the order reversed every other round; speedup_vs_serial is the median of the rounds' ratios.

    Rows: link, link_GBps, link_source, pattern, schedule, comm_sms, gpus, m, k, n, inner, time_median_us,
    time_min_us, time_max_us, speedup_vs_serial, link_bytes (what one rank moves over its link: the schedule's
    structure, `model.link_bytes`), hbm_bytes (the HBM traffic those bytes make on a real rank: read where sent,
    written where received; the emulated copy makes as much), comm_GBps (the paced copies' rate, from the first
    copy reached to the last one done, or for SM-driven communication link_bytes over the time), comm_over_link,
    faithful (its bytes move by paced copies that take no SM from its GEMM: `copies_beside_full_gpu`, or serial,
    whose copies run alone; where copies need SMs, ce_flags has no rows), verified (AG+GEMM rank 0 against
    float32; None where its output sums stand-ins).
"""
    import cupy as cp

    import pkit

    rates = [(link, *link_rate(link, root)) for link in links]
    pacers = {link: Pacer(gbps * 1e9) for link, gbps, _ in rates}  # one emulated link (and its gate) per rate
    rows = []
    with cp.cuda.Device(device), cp.cuda.Stream(non_blocking=True):
        points = [(r, w, p, x) for r in rates for w in world_sizes for p in patterns for x in inner]
        teams = {w: pkit.Team([device] * w, share_gpus=True) for w in world_sizes}
        for (link, gbps, source), w, pattern, x in tqdm(points, desc="emulated overlap points"):
            pacer = pacers[link]
            op = _op(pattern, teams[w], pacer, x)
            beside = copies_beside_full_gpu(device)["beside"]
            variants = [(s, o) for s in PATTERNS[pattern].names for o in PATTERNS[pattern].schedule(s).variants()
                        if beside or s != "ce_flags"]  # ce_flags needs copies beside its GEMM (copies_beside_full_gpu)
            verdicts = {}
            gather = PATTERNS[pattern].flow == "in"
            for s, o in variants:
                if gather:
                    _poison(op)
                _timed(op, s, o, pacer, device, hold=False)
                verdicts[s] = _check_gather(op) if gather else (None, float("nan"))
            times = {v: [] for v in range(len(variants))}
            rates_seen = {v: [] for v in range(len(variants))}
            for r in range(rounds):
                order = range(len(variants)) if r % 2 == 0 else reversed(range(len(variants)))
                for v in order:
                    ms, comm = _timed(op, *variants[v], pacer, device)
                    times[v].append(ms)
                    rates_seen[v].append(comm)
            serial = np.array(times[0])
            for v, (s, o) in enumerate(variants):
                rows.append(_row(link, gbps, source, pattern, s, o, w, op, x, np.array(times[v]), serial,
                                 rates_seen[v], verdicts[s], beside))
            del op
    return pd.DataFrame(rows)


def _row(link, gbps, source, pattern, schedule, options, w, op, inner, times, serial, seen, verdict,
         beside: bool = True) -> dict:
    m, k, n = M.shape_of(pattern, inner, w)
    structure = M.describe(pattern, schedule).structure
    moved = M.link_bytes(pattern, schedule, m, k, n, w)
    ms = float(np.median(times))
    paced = PATTERNS[pattern].schedule(schedule).transfer in ("ce", "nccl")
    alone = structure.overlap == "none"  # nothing else wants the SMs while its copies run
    faithful = paced and (beside or alone)  # paced copies that take no SM from the GEMM, as a copy engine's
    comm = float(np.median(seen)) if paced else moved / (ms * 1e-3) / 1e9
    return {"link": str(link), "link_GBps": gbps, "link_source": source, "pattern": pattern, "schedule": schedule,
            "comm_sms": options.get("comm_sms", 0), "gpus": w, "m": m, "k": k, "n": n, "inner": inner,
            "time_median_us": ms * 1e3, "time_min_us": float(times.min()) * 1e3,
            "time_max_us": float(times.max()) * 1e3, "speedup_vs_serial": float(np.median(serial / times)),
            "link_bytes": moved, "hbm_bytes": moved * structure.hbm_per_link_byte,
            "comm_GBps": comm, "comm_over_link": comm / gbps, "faithful": faithful, "verified": verdict[0]}


def link_checks(device: int = 0, links: Sequence = ("h200x2",), nbytes: int = CHECK_BYTES, comm_sms: int = 16,
                reps: int = 5, root=None) -> pd.DataFrame:
    """What the emulation's copies are, measured alone on GPU `device`, per link of `links`: the paced copy of
    `nbytes` (paced_GBps, held = paced over the rate asked), the same copy unpaced (free_GBps) and the HBM traffic it
    makes per byte copied (hbm_bytes_per_byte: HBM's read + write rate recorded for a local copy,
    results/<this machine>/hierarchy_matrix where recorded, over free_GBps; 2 for a copy that reads and writes each
    byte once), and an SM copy on `comm_sms` SMs (sm_pull's), which an emulated sm_pull runs at locally
    (sm_GBps, sm_over_link)."""
    import cupy as cp

    from ... import results
    from ...ops.transfers import peer_copy
    from ...timing import bench

    hbm = float("nan")
    machine = results.machine_slug()
    if results.is_recorded("hierarchy_matrix", machine, root=root):
        matrix = results.load("hierarchy_matrix", machine, root=root).frame
        local = matrix[matrix["testcase"] == "device_local_copy"]
        hbm = float(local["bandwidth_GBps"].iloc[0]) if len(local) else hbm
    rows = []
    with cp.cuda.Device(device), cp.cuda.Stream(non_blocking=True) as stream:
        src = cp.random.randint(0, 256, nbytes, dtype=cp.uint8)
        dst = cp.empty(nbytes, dtype=cp.uint8)
        free = bench(lambda: memcpy(dst.data.ptr, src.data.ptr, nbytes, cp.cuda.get_current_stream()),
                     devices=[device], warmup=2, reps=reps).median_ms  # the paced copy's own call, unpaced
        sm = bench(lambda: peer_copy(dst, src, "sm", comm_sms), devices=[device], warmup=2, reps=reps).median_ms
        for link in links:
            gbps, source = link_rate(link, root)
            pacer = Pacer(gbps * 1e9)
            paced = []
            for _ in range(reps):
                stream.synchronize()
                start = cp.cuda.Event()
                pacer.begin(stream)
                start.record(stream)
                pacer.copy(dst.data.ptr, src.data.ptr, nbytes, stream)
                pacer.release()
                pacer.last_end.synchronize()
                paced.append(nbytes / (cp.cuda.get_elapsed_time(start, pacer.last_end) * 1e-3) / 1e9)
            verified = bool(cp.array_equal(src, dst))
            free_GBps, sm_GBps = nbytes / (free * 1e-3) / 1e9, nbytes / (sm * 1e-3) / 1e9
            beside = copies_beside_full_gpu(device)
            rows.append({"link": str(link), "link_GBps": gbps, "link_source": source, "bytes": nbytes,
                         "paced_GBps": float(np.median(paced)), "held": float(np.median(paced)) / gbps,
                         "free_GBps": free_GBps, "hbm_recorded_GBps": hbm, "hbm_bytes_per_byte": hbm / free_GBps,
                         "comm_sms": comm_sms, "sm_GBps": sm_GBps, "sm_over_link": sm_GBps / gbps,
                         "beside_full_gpu": beside["beside"], "beside_copy_ms": beside["copy_ms"],
                         "verified": verified})
    return pd.DataFrame(rows)


def parameters(device: int, links: Sequence, world_sizes: Sequence[int], rounds: int) -> dict:
    """The parameters recorded with both experiments.

    >>> parameters(0, ["h200x2", 300.0], (2, 8), 3)
    {'device': 0, 'links': ['h200x2', '300.0'], 'world_sizes': [2, 8], 'rounds': 3}
    """
    return {"device": int(device), "links": [str(x) for x in links], "world_sizes": [int(w) for w in world_sizes],
            "rounds": int(rounds)}


def _link_arg(text: str):
    try:
        return float(text)
    except ValueError:
        return text


def measure(experiment: str, device: int = 0, links: Sequence = ("h200x2",), world_sizes=WORLD_SIZES,
            rounds: int = ROUNDS) -> pd.DataFrame:
    """One of EXPERIMENTS: 'overlap_emulated' (`emulated`) or 'overlap_emulated_link' (`link_checks`)."""
    if experiment not in EXPERIMENTS:
        raise ValueError(f"experiment: expected one of {EXPERIMENTS}, got {experiment!r}")
    if experiment == "overlap_emulated":
        return emulated(device, links, world_sizes, rounds=rounds)
    return link_checks(device, links)


def main(argv=None) -> None:
    """Measure both experiments on one GPU and print them; --record writes results/<machine>/<experiment>.*."""
    import argparse

    from ... import results
    from ...studies import require_part

    parser = argparse.ArgumentParser(prog="python -m pkit.experiments.overlap.emulated", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--links", nargs="+", type=_link_arg, default=["h200x2"],
                        help="h200x2 (recorded), h200x8 (datasheet), pcie (datasheet) or GB/s")
    parser.add_argument("--world-sizes", type=int, nargs="+", default=list(WORLD_SIZES))
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--record", action="store_true", help="write results/<machine>/overlap_emulated*.{csv,json}")
    args = parser.parse_args(argv)
    for experiment in EXPERIMENTS:
        require_part(experiment, prog=parser.prog)
    params = parameters(args.device, args.links, args.world_sizes, args.rounds)
    for experiment in EXPERIMENTS:
        frame = measure(experiment, args.device, args.links, args.world_sizes, args.rounds)
        with pd.option_context("display.width", 200, "display.max_columns", None):
            print(frame.round(3), flush=True)
        if args.record:
            print(f"recorded {results.record(experiment, frame, params).csv_path}", flush=True)


def recorded(experiment: str, *, mode: str, machine: str, device: int = 0, links: Sequence = ("h200x2",),
             world_sizes=WORLD_SIZES, rounds: int = ROUNDS):
    """One of EXPERIMENTS through `pkit.studies.measure_or_replay` (measured on one GPU and recorded, or replayed
    from `machine`); None, after a line saying why, where it is not recorded there."""
    from ...studies import measure_or_replay

    return measure_or_replay(experiment, lambda: measure(experiment, device, links, world_sizes, rounds), mode=mode,
                             machine=machine,
                             parameters=parameters(device, links, world_sizes, rounds) if mode == "measure" else None)


if __name__ == "__main__":
    main()
