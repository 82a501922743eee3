"""Bandwidth matrix in nvbandwidth's vocabulary: copy-engine (CE) and SM copies between GPUs and the host.

Every testcase has nvbandwidth's name and a one-line description; its `engine` is `ce` or `sm` (pkit's words
for the two, as in pkit.ops.transfers and the collectives), printed upper-case in nvbandwidth's layout. CE copies are `cudaMemcpyAsync` on a
stream of the GPU whose copy engine should move the data (the reader for `read` tests, the writer for
`write` tests); SM copies are pkit's `copy16` kernel launched on that GPU. Host memory is pinned and
mapped, so SM kernels reach it over PCIe directly. Bidirectional tests run both directions at once and
count both; a local copy counts its read and its write. Every destination is poisoned before timing and
compared word by word with the source after it.

Example:
    >>> from pkit.experiments.hierarchy import matrix as M
    >>> print(M.TESTCASES["device_to_device_memcpy_read_ce"].description)
    GPU(row) reads GPU(column) with the reader's copy engine
    >>> M.plan_copies("d2d_read", 0, 1)
    (Copy(src='GPU0', dst='GPU1', issuer=1),)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from ...launch import THREADS
from ...ops.transfers import check_gpus, gpu_count
from ...vocabulary import families
from .memory import pattern, pinned

POISON = np.uint32(0xA5A5A5A5)
MiB = 1 << 20


@dataclass(frozen=True)
class MatrixCase:
    name: str
    engine: str  # ce (copy engine) or sm (copy kernel)
    kind: str  # which copies: see plan_copies
    arrow: str  # how the printed matrix reads: '->' rows are sources, '<-' rows are destinations, '<->' both
    description: str


@dataclass(frozen=True)
class Copy:
    src: str  # 'CPU' or 'GPU<i>'
    dst: str
    issuer: int  # the GPU whose copy engine or SMs move the bytes


_KINDS = {  # kind: (arrow, description with {engine})
    "h2d": ("->", "CPU(row) writes each GPU(column) with the GPU's {engine}"),
    "d2h": ("<-", "CPU(row) receives from each GPU(column) with the GPU's {engine}"),
    "h2d_bidir": ("<->", "CPU(row) to and from each GPU(column) at once with the GPU's {engine}"),
    "d2d_read": ("<-", "GPU(row) reads GPU(column) with the reader's {engine}"),
    "d2d_write": ("->", "GPU(row) writes GPU(column) with the writer's {engine}"),
    "d2d_bidir_read": ("<->", "GPU(row) and GPU(column) read each other at once, each with its {engine}"),
    "d2d_bidir_write": ("<->", "GPU(row) and GPU(column) write each other at once, each with its {engine}"),
    "local": ("->", "GPU copies within its own memory with its {engine} (read + write counted)"),
}
_NAMES = {"h2d": "host_to_device_memcpy", "d2h": "device_to_host_memcpy",
          "h2d_bidir": "host_to_device_bidirectional_memcpy", "d2d_read": "device_to_device_memcpy_read",
          "d2d_write": "device_to_device_memcpy_write", "d2d_bidir_read": "device_to_device_bidirectional_memcpy_read",
          "d2d_bidir_write": "device_to_device_bidirectional_memcpy_write", "local": "device_local_copy"}
_ENGINE_WORDS = {"ce": "copy engine", "sm": "SMs"}


def _testcase(kind: str, engine: str) -> MatrixCase:
    name = _NAMES[kind] + ("" if (kind, engine) == ("local", "ce") else f"_{engine}")
    arrow, text = _KINDS[kind]
    return MatrixCase(name, engine, kind, arrow, text.format(engine=_ENGINE_WORDS[engine]))


TESTCASES = {t.name: t for t in (_testcase(kind, engine) for engine in families(*_ENGINE_WORDS) for kind in _KINDS)}


def plan_copies(kind: str, a: int, b: int | None = None) -> tuple[Copy, ...]:
    """The copies one measurement of `kind` runs at once, between GPU `a` and GPU `b` (or the host)."""
    if kind not in _KINDS:
        raise ValueError(f"kind: expected one of {sorted(_KINDS)}, got {kind!r}")
    ga, gb = f"GPU{a}", f"GPU{b}"
    return {"h2d": (Copy("CPU", ga, a),), "d2h": (Copy(ga, "CPU", a),),
            "h2d_bidir": (Copy("CPU", ga, a), Copy(ga, "CPU", a)),
            "d2d_read": (Copy(ga, gb, b),), "d2d_write": (Copy(ga, gb, a),),
            "d2d_bidir_read": (Copy(ga, gb, b), Copy(gb, ga, a)),
            "d2d_bidir_write": (Copy(ga, gb, a), Copy(gb, ga, b)),
            "local": (Copy(ga, ga, a),)}[kind]


def counted(kind: str) -> tuple[str, int]:
    """What a row's bandwidth counts, and how many times the buffer size that is."""
    if kind == "local":
        return "read+write", 2
    return ("both directions", 2) if "bidir" in kind else ("one direction", 1)


def _endpoints(kind: str, gpus: Sequence[int]) -> list[tuple[int, int | None]]:
    if kind.startswith("d2d"):
        return [(a, b) for a in gpus for b in gpus if a != b]
    return [(g, None) for g in gpus]


def _check(gpus, nbytes, testcases, reps, warmup) -> tuple[list[int] | None, list[str] | None]:
    """The arguments checked without asking the machine; gpus and testcases stay None where not given."""
    if gpus is not None:
        gpus = list(gpus)
        if not gpus or len(set(gpus)) != len(gpus) or not all(isinstance(g, (int, np.integer)) and g >= 0
                                                               for g in gpus):
            raise ValueError(f"gpus: expected distinct GPU ids (or None: every GPU), got {gpus!r}")
        gpus = [int(g) for g in gpus]
    if not isinstance(nbytes, (int, np.integer)) or nbytes <= 0 or nbytes % 16:
        raise ValueError(f"nbytes: expected a positive multiple of 16 bytes, got {nbytes!r}")
    names = None if testcases is None else list(testcases)
    unknown = [n for n in names or () if n not in TESTCASES]
    if unknown or names == []:
        raise ValueError(f"testcases: unknown {unknown or names}; known: {list(TESTCASES)}")
    if gpus is not None and names is not None:
        _check_d2d(gpus, names)
    if not isinstance(reps, (int, np.integer)) or reps < 1 or not isinstance(warmup, (int, np.integer)) or warmup < 0:
        raise ValueError(f"reps, warmup: expected reps >= 1 and warmup >= 0, got {reps!r}, {warmup!r}")
    return gpus, names


def _check_d2d(gpus: list[int], names: list[str]) -> None:
    if len(gpus) < 2 and any(TESTCASES[n].kind.startswith("d2d") for n in names):
        raise ValueError(f"gpus: device-to-device testcases need two GPUs, got {gpus}; leave testcases=None to "
                         "measure the others")


def on_machine(gpus: list[int] | None, names: list[str] | None, n_gpus: int | None = None):
    """`gpus` (None: every GPU of the machine) checked against it, and the testcases to run (None: all of
    TESTCASES, less the device-to-device ones with one GPU).

    Example:
        >>> gpus, names = on_machine(None, None, n_gpus=1)
        >>> gpus, [n for n in names if n.endswith("_ce")]
        ([0], ['host_to_device_memcpy_ce', 'device_to_host_memcpy_ce', 'host_to_device_bidirectional_memcpy_ce'])
    """
    n = gpu_count() if n_gpus is None else n_gpus
    gpus = list(range(n)) if gpus is None else gpus
    check_gpus("gpus", gpus or [0], n)
    if names is None:
        names = [k for k, t in TESTCASES.items() if len(gpus) >= 2 or not t.kind.startswith("d2d")]
    _check_d2d(gpus, names)
    return gpus, names


class _Buffers:
    """Sources (holding `pattern`) and destinations on the host and on every GPU, by label."""

    def __init__(self, gpus: Sequence[int], nbytes: int, stack):
        import cupy as cp

        n_words = nbytes // 4
        (self.src_host, src_view), (self.dst_host, self.dst_view) = (stack.enter_context(pinned(nbytes))
                                                                     for _ in range(2))
        self.src_view = src_view.view(np.uint32)
        self.src_view[:] = pattern(np, n_words)
        self.src = {"CPU": self.src_host}
        self.dst = {"CPU": self.dst_host}
        self.arrays: dict[str, tuple] = {}
        self.side_streams = {}
        for g in gpus:
            with cp.cuda.Device(g):
                a, b = pattern(cp, n_words), cp.empty(n_words, dtype=cp.uint32)
                self.side_streams[g] = cp.cuda.Stream(non_blocking=True)
            self.arrays[f"GPU{g}"] = (a, b)
            self.src[f"GPU{g}"], self.dst[f"GPU{g}"] = a.data.ptr, b.data.ptr

    def poison(self, label: str) -> None:
        import cupy as cp

        if label == "CPU":
            self.dst_view.fill(0xA5)
            return
        with cp.cuda.Device(int(label[3:])):
            self.arrays[label][1].fill(POISON)

    def verified(self, label: str) -> bool:
        """The destination at `label` equals the source pattern, word for word."""
        import cupy as cp

        if label == "CPU":
            return bool(np.array_equal(self.dst_view.view(np.uint32), self.src_view))
        with cp.cuda.Device(int(label[3:])):
            src, dst = self.arrays[label]
            return bool(cp.array_equal(dst, src))


def _enqueue_all(engine: str, copies: Sequence[Copy], buffers: _Buffers, nbytes: int, kernel, sms: int) -> None:
    """Start every copy on its issuer's current stream; two copies on one GPU fork onto a side stream
    (each then gets half the SMs, so both kernels are resident at once)."""
    import cupy as cp

    def start(copy: Copy, stream, blocks: int) -> None:
        dst, src = buffers.dst[copy.dst], buffers.src[copy.src]
        if engine == "ce":
            cp.cuda.runtime.memcpyAsync(dst, src, nbytes, cp.cuda.runtime.memcpyDefault, stream.ptr)
        else:
            kernel((blocks,), (THREADS,), (np.uint64(dst), np.uint64(src), np.uint64(nbytes // 16)),
                   device=copy.issuer, stream=stream)

    for issuer in sorted({c.issuer for c in copies}):
        group = [c for c in copies if c.issuer == issuer]
        with cp.cuda.Device(issuer):
            main = cp.cuda.get_current_stream()
            if len(group) == 1:
                start(group[0], main, 4 * sms)
                continue
            side = buffers.side_streams[issuer]
            fork = cp.cuda.Event(disable_timing=True)
            fork.record(main)
            side.wait_event(fork)
            start(group[0], main, 2 * sms)
            start(group[1], side, 2 * sms)
            join = cp.cuda.Event(disable_timing=True)
            join.record(side)
            main.wait_event(join)


def bandwidth_matrix(gpus: Sequence[int] | None = None, nbytes: int = 512 * MiB,
                     testcases: Sequence[str] | None = None, reps: int = 10, warmup: int = 3) -> pd.DataFrame:
    """Every testcase (default: all of TESTCASES) between every GPU pair of `gpus` (default: every GPU of the
    machine), and each GPU and the host. With one GPU the default leaves the device-to-device testcases out:
    the matrix is then its local copy, host → device, device → host and both at once, by ce and sm.

    `nbytes` per copy (default 512 MiB, nvbandwidth's default; keep it well above 3× the L2 so no copy is
    served from cache). Timing: `pkit.bench` over the issuing GPUs, launches queued behind a spin kernel,
    `warmup` + `reps` calls, medians. One row per (testcase, src, dst, bytes): engine ('ce' or 'sm'), copies
    (1 or 2 at once), counted, bandwidth_GBps (10⁹ B/s of what `counted` says), time_{median,min,max}_us, cv,
    verified.

    Example:
        >>> bandwidth_matrix((0, 1), testcases=["device_to_device_memcpy_write_ce"])     # doctest: +SKIP
        >>> bandwidth_matrix(testcases=["device_local_copy", "host_to_device_memcpy_ce"])  # doctest: +SKIP
    """
    from contextlib import ExitStack

    import pkit

    gpus, names = on_machine(*_check(gpus, nbytes, testcases, reps, warmup))
    pkit.Team(gpus)  # peer access among all GPUs
    kernel = pkit.compile("copy.cu", "copy16")
    sms = min(pkit.devices()[g].sms for g in gpus)
    rows = []
    with ExitStack() as stack:
        buffers = _Buffers(gpus, int(nbytes), stack)
        for name in names:
            t = TESTCASES[name]
            what, factor = counted(t.kind)
            for a, b in _endpoints(t.kind, gpus):
                copies = plan_copies(t.kind, a, b)
                for c in copies:
                    buffers.poison(c.dst)
                pkit.launch.synchronize(gpus)
                r = pkit.bench(lambda: _enqueue_all(t.engine, copies, buffers, nbytes, kernel, sms),
                               devices=sorted({c.issuer for c in copies}), warmup=warmup, reps=reps, hide_launch=True)
                bad = [c for c in copies if not buffers.verified(c.dst)]
                if bad:
                    raise AssertionError(f"{name}: the copy {bad[0].src} -> {bad[0].dst} is wrong after timing")
                rows.append({"testcase": name, "engine": t.engine, "src": copies[0].src, "dst": copies[0].dst,
                             "bytes": int(nbytes), "copies": len(copies), "counted": what,
                             "bandwidth_GBps": r.gbps(factor * nbytes), **r.times_us(), "verified": True})
    return pd.DataFrame(rows)


def _label_key(label: str) -> tuple[int, int]:
    return (0, 0) if label == "CPU" else (1, int(label[3:]))


def format_matrix(frame: pd.DataFrame, testcase: str) -> str:
    """nvbandwidth-style text for one testcase of a matrix frame (its largest size); N/A where unmeasured.

    Example:
        >>> import pandas as pd
        >>> df = pd.DataFrame({"testcase": ["device_to_device_memcpy_write_ce"] * 2, "src": ["GPU0", "GPU1"],
        ...                    "dst": ["GPU1", "GPU0"], "bytes": [1 << 29] * 2, "counted": ["one direction"] * 2,
        ...                    "bandwidth_GBps": [390.5, 391.25]})
        >>> print(format_matrix(df, "device_to_device_memcpy_write_ce"))
        Running device_to_device_memcpy_write_ce.
        memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s), one direction, 512 MiB
                       0         1
             0       N/A    390.50
             1    391.25       N/A
    """
    if testcase not in TESTCASES:
        raise ValueError(f"testcase: expected one of {list(TESTCASES)}, got {testcase!r}")
    missing = {"testcase", "src", "dst", "bytes", "counted", "bandwidth_GBps"} - set(frame.columns)
    if missing:
        raise ValueError(f"frame: missing columns {sorted(missing)}")
    rows = frame[frame["testcase"] == testcase]
    if rows.empty:
        raise ValueError(f"testcase: no rows for {testcase!r} in the frame")
    rows = rows[rows["bytes"] == rows["bytes"].max()]
    t = TESTCASES[testcase]
    row_key, col_key = ("dst", "src") if t.arrow == "<-" else ("src", "dst")
    values = {(r[row_key], r[col_key]): r["bandwidth_GBps"] for _, r in rows.iterrows()}
    row_labels = sorted(set(rows[row_key]), key=_label_key)
    col_labels = sorted(set(rows[col_key]), key=_label_key)
    kind = lambda labels: "CPU" if labels == ["CPU"] else "GPU"  # noqa: E731
    index = lambda label: "0" if label == "CPU" else label[3:]  # noqa: E731
    lines = [f"Running {testcase}.",
             f"memcpy {t.engine.upper()} {kind(row_labels)}(row) {t.arrow} {kind(col_labels)}(column) bandwidth (GB/s), "
             f"{rows['counted'].iloc[0]}, {int(rows['bytes'].iloc[0]) // MiB} MiB",
             " " * 6 + "".join(f"{index(c):>10}" for c in col_labels)]
    for r in row_labels:
        cells = (f"{values[(r, c)]:10.2f}" if (r, c) in values else f"{'N/A':>10}" for c in col_labels)
        lines.append(f"{index(r):>6}" + "".join(cells))
    return "\n".join(lines)


def matrix_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Every testcase of a matrix frame in one table: a row per testcase (TESTCASES order), a column per
    'src -> dst' pair, GB/s of what the testcase counts (see `counted`) at its largest size; NaN where a
    testcase has no such pair. The same numbers as `print_matrix`, in one screen (`engine_table`: the same without
    its empty cells).

    Example:
        >>> df = pd.DataFrame({"testcase": ["device_to_device_memcpy_write_ce"] * 2 + ["device_local_copy"],
        ...                    "src": ["GPU0", "GPU1", "GPU0"], "dst": ["GPU1", "GPU0", "GPU0"],
        ...                    "bytes": [1 << 29] * 3, "bandwidth_GBps": [395.5, 395.6, 4161.3]})
        >>> matrix_table(df)                                                        # doctest: +NORMALIZE_WHITESPACE
        pair                              GPU0 -> GPU0  GPU0 -> GPU1  GPU1 -> GPU0
        testcase
        device_to_device_memcpy_write_ce           NaN         395.5         395.6
        device_local_copy                       4161.3           NaN           NaN
    """
    missing = {"testcase", "src", "dst", "bytes", "bandwidth_GBps"} - set(frame.columns)
    if missing:
        raise ValueError(f"frame: missing columns {sorted(missing)}")
    largest = frame[frame["bytes"] == frame.groupby("testcase")["bytes"].transform("max")]
    table = largest.assign(pair=largest["src"] + " -> " + largest["dst"]).pivot_table(
        index="testcase", columns="pair", values="bandwidth_GBps", aggfunc="first")
    pairs = sorted(table.columns, key=lambda p: tuple(_label_key(side) for side in p.split(" -> ")))
    return table.reindex(index=[t for t in TESTCASES if t in table.index], columns=pairs)


def engine_table(frame: pd.DataFrame) -> pd.DataFrame:
    """`matrix_table`'s numbers without its empty cells: a row per testcase (its name without the engine suffix, in
    TESTCASES order) and 'src -> dst' pair it has, a column per engine (copy engine `ce`, SM copy kernel `sm`), GB/s
    of what the testcase counts at its largest size. `matrix_table` keeps nvbandwidth's own layout.

    Example:
        >>> df = pd.DataFrame({"testcase": ["device_local_copy", "device_local_copy_sm"], "engine": ["ce", "sm"],
        ...                    "src": ["GPU0"] * 2, "dst": ["GPU0"] * 2, "bytes": [1 << 29] * 2,
        ...                    "bandwidth_GBps": [4161.3, 3832.0]})
        >>> engine_table(df)                                                        # doctest: +NORMALIZE_WHITESPACE
        engine                                ce      sm
        testcase          pair
        device_local_copy GPU0 -> GPU0  4161.3  3832.0
    """
    missing = {"testcase", "engine", "src", "dst", "bytes", "bandwidth_GBps"} - set(frame.columns)
    if missing:
        raise ValueError(f"frame: missing columns {sorted(missing)}")
    largest = frame[frame["bytes"] == frame.groupby("testcase")["bytes"].transform("max")]
    named = largest.assign(testcase=largest["testcase"].str.removesuffix("_sm").str.removesuffix("_ce"),
                           pair=largest["src"] + " -> " + largest["dst"])
    table = named.pivot_table(index=["testcase", "pair"], columns="engine", values="bandwidth_GBps", aggfunc="first")
    order = {name.removesuffix("_sm").removesuffix("_ce"): i for i, name in reversed(list(enumerate(TESTCASES)))}
    rows = sorted(table.index, key=lambda r: (order.get(r[0], len(order)),
                                             tuple(_label_key(side) for side in r[1].split(" -> "))))
    return table.reindex(rows)


ONE_WAY = ("host_to_device_memcpy", "device_to_host_memcpy", "device_to_device_memcpy_write", "device_local_copy")


def plot_matrix(frame: pd.DataFrame, provenance: dict):
    """The one-way testcases of a matrix frame (`ONE_WAY`, by copy engine and by SM copy kernel) as two heatmaps,
    source × destination, on one logarithmic colour scale (GB/s); a pair without a testcase hatched. Returns the
    figure.

    Example:
        >>> import matplotlib; matplotlib.use("Agg")
        >>> df = pd.DataFrame({"testcase": ["device_local_copy", "device_local_copy_sm"], "engine": ["ce", "sm"],
        ...                    "src": ["GPU0"] * 2, "dst": ["GPU0"] * 2, "bytes": [1 << 29] * 2,
        ...                    "bandwidth_GBps": [4161.3, 3900.0]})
        >>> [ax.get_title() for ax in plot_matrix(df, {"machine": "m", "gpus": ["G"]}).axes[:2]]
        ['copy engine (CE)', 'SM copy kernel (SM)']
    """
    import matplotlib.colors as mcolors

    from ... import figures

    nodes = sorted(set(frame["src"]) | set(frame["dst"]), key=lambda s: (s != "CPU", s))
    fig, axes = figures.subplots(1, 2, figsize=(10, 4.8))
    norm = mcolors.LogNorm(frame["bandwidth_GBps"].min(), frame["bandwidth_GBps"].max())
    one_way = frame["testcase"].str.removesuffix("_sm").str.removesuffix("_ce").isin(ONE_WAY)
    for ax, engine in zip(axes, ["ce", "sm"]):
        rows = frame[(frame["engine"] == engine) & one_way]
        grid = rows.pivot_table(index="src", columns="dst", values="bandwidth_GBps").reindex(index=nodes, columns=nodes)
        mesh = figures.heatmap(ax, grid, cmap="viridis", norm=norm, fmt=",.0f", missing="no testcase")
        ax.set(xlabel="destination", ylabel="source", title={"ce": "copy engine (CE)", "sm": "SM copy kernel (SM)"}[engine])
        ax.tick_params(axis="y", rotation=0)
    fig.colorbar(mesh, ax=axes, shrink=0.8, label="GB/s, one direction")
    sizes = " / ".join(figures.byte_label(b) for b in sorted(frame["bytes"].unique()))
    figures.suptitle(fig, f"Bandwidth matrix, one direction, {sizes} per copy (GB/s)", provenance)
    figures.caption(fig, "CE: cudaMemcpyAsync on a stream of the GPU taking part (GPU → GPU: the writer's); SM: pkit's "
                         "16-byte copy kernel launched on that GPU. Each cell: median over repeated copies. Diagonal: a "
                         "local copy, counting its read and its write. Host memory is pinned; 'no testcase': "
                         "nvbandwidth has none for that pair.")
    return fig


KEY_PATHS = (  # (path, testcase, src, dst): 'device' and 'peer' stand for the two GPUs, 'CPU' for the host
    ("peer, copy engine, one way", "device_to_device_memcpy_write_ce", "device", "peer"),
    ("peer, copy engine, both ways", "device_to_device_bidirectional_memcpy_write_ce", "device", "peer"),
    ("peer, SM push", "device_to_device_memcpy_write_sm", "device", "peer"),
    ("peer, SM pull", "device_to_device_memcpy_read_sm", "device", "peer"),
    ("local copy (read + write)", "device_local_copy", "device", "device"),
    ("host to device (pinned)", "host_to_device_memcpy_ce", "CPU", "device"),
    ("device to host (pinned)", "device_to_host_memcpy_ce", "device", "CPU"),
)


def key_paths(frame: pd.DataFrame, device: int = 0, peer: int | None = None) -> pd.DataFrame:
    """The matrix's headline numbers (`KEY_PATHS`) between GPU `device`, GPU `peer` (default: the next GPU the
    frame measured after `device`, none on one GPU) and the host: one row per path the frame measured, with its
    testcase, bandwidth_GBps (10⁹ B/s of what the testcase counts) and cv.

    Example:
        >>> df = pd.DataFrame({"testcase": ["device_to_device_memcpy_write_ce", "device_to_host_memcpy_ce"],
        ...                    "src": ["GPU0", "GPU0"], "dst": ["GPU1", "CPU"], "bytes": [1 << 29] * 2,
        ...                    "bandwidth_GBps": [400.0, 50.0], "cv": [0.001, 0.002]})
        >>> key_paths(df)[["path", "bandwidth_GBps"]].values.tolist()
        [['peer, copy engine, one way', 400.0], ['device to host (pinned)', 50.0]]
    """
    missing = {"testcase", "src", "dst", "bytes", "bandwidth_GBps", "cv"} - set(frame.columns)
    if missing:
        raise ValueError(f"frame: missing columns {sorted(missing)}")
    if peer is None:
        measured = sorted({int(e[3:]) for e in (*frame["src"], *frame["dst"]) if e.startswith("GPU")} - {device})
        peer = next((g for g in measured if g > device), measured[0] if measured else None)
    where = {"device": f"GPU{device}", "peer": f"GPU{peer}", "CPU": "CPU"}
    largest = frame[frame["bytes"] == frame.groupby("testcase")["bytes"].transform("max")]
    rows = []
    for path, testcase, src, dst in KEY_PATHS:
        match = largest[(largest["testcase"] == testcase) & (largest["src"] == where[src])
                        & (largest["dst"] == where[dst])]
        if len(match):
            rows.append({"path": path, "testcase": testcase, "src": where[src], "dst": where[dst],
                         "bandwidth_GBps": float(match["bandwidth_GBps"].iloc[0]), "cv": float(match["cv"].iloc[0])})
    return pd.DataFrame(rows, columns=["path", "testcase", "src", "dst", "bandwidth_GBps", "cv"])


def print_matrix(frame: pd.DataFrame) -> None:
    """Print every testcase of a matrix frame, in TESTCASES order, as nvbandwidth does."""
    for name in TESTCASES:
        if (frame["testcase"] == name).any():
            print(format_matrix(frame, name), end="\n\n")
