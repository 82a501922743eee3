"""Transfer mechanisms: argument checks and the SM-saturation summary on CPU; real copies on one GPU (its local
and host routes) and on 2 GPUs."""
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import pkit
from pkit.experiments import collectives, mechanisms, overlap, peer_copies, quickstart
from pkit.ops import transfers

SINGLE_GPU_ROUTES = ("GPU0 → GPU0", "CPU → GPU0", "GPU0 → CPU")


def test_sms_to_reach_reads_the_sweep():
    sweep = pd.DataFrame([
        {"mechanism": "ce", "blocks": 0, "bandwidth_GBps": 400.0},
        *({"mechanism": "tma_push", "blocks": b, "bandwidth_GBps": min(400.0, 30.0 * b)} for b in (1, 4, 8, 16, 32)),
        *({"mechanism": "sm_push", "blocks": b, "bandwidth_GBps": 3.0 * b} for b in (1, 16, 66, 132)),
        *({"mechanism": "tma_pull", "blocks": b, "bandwidth_GBps": 2.0 * b} for b in (1, 16, 66, 132)),
    ])
    need = mechanisms.sms_to_reach(sweep, fraction=0.9).set_index("mechanism")
    assert need.loc["tma_push", "blocks_needed"] == 16
    assert need.loc["sm_push", "blocks_needed"] == 132
    assert pd.isna(need.loc["tma_pull", "blocks_needed"]) and need.loc["tma_pull", "best_GBps"] == 264.0
    assert (need["reference_GBps"] == 400.0).all()
    with pytest.raises(ValueError, match="fraction"):
        mechanisms.sms_to_reach(sweep, fraction=1.5)


def test_recorded_results_speak_one_vocabulary():
    """Every name a recorded result carries is one pkit uses today; names mapped after recording say so."""
    torch = {"torch_nccl", "torch_symm_one_shot", "torch_symm_two_shot"}
    known = {"mechanism": set(transfers.ALL_MECHANISMS), "first": set(transfers.MECHANISMS),
             "second": set(transfers.MECHANISMS),
             "engine": {transfers.family(m) for m in transfers.ALL_MECHANISMS} | {"none"},  # none: SMs left idle
             "implementation": set(collectives.implementation_names()) | torch | {"empty_kernel"}
             | set(overlap.GEMM_IMPLEMENTATIONS) | set(overlap.gemm.STUDY_IMPLEMENTATIONS)}
    csvs = sorted((Path(__file__).resolve().parents[1] / "results").glob("*/*.csv"))
    assert csvs
    for path in csvs:
        frame = pd.read_csv(path)
        for column in set(known) & set(frame.columns):
            assert set(frame[column]) <= known[column], (path.name, column, set(frame[column]) - known[column])
        renamed = pkit.results.load(path.stem, path.parent.name).provenance.get("renamed")
        if renamed:
            assert {"commit", "note"} <= set(renamed) and all(
                set(new.values()) <= known[column] for column, new in renamed.items() if column in known)


@pytest.mark.parametrize("kwargs, text", [
    (dict(nbytes=1000), "multiples of 16"),
    (dict(mechanisms=["warp_drive"]), "mechanisms: unknown"),
    (dict(blocks=[0, 4]), "blocks: expected"),
    (dict(routes=["GPU0 → GPU0"], src=0), "routes, src, dst: expected routes or src/dst, not both"),
    (dict(routes=["GPU0 => GPU1"]), "route: expected a label such as"),
])
def test_sm_sweep_validates_arguments(kwargs, text):
    with pytest.raises(ValueError, match=text):
        mechanisms.sm_sweep(**kwargs)


def test_collective_sweep_validates_arguments():
    with pytest.raises(ValueError, match="ops: unknown"):
        collectives.sweep(ops=["no-such-op"])  # never registered: an op's name is a Python identifier
    with pytest.raises(ValueError, match="dtype"):
        collectives.sweep(dtype="int8")
    with pytest.raises(ValueError, match="implementations: expected names from"):
        collectives.sweep(implementations=["pkit_magic"])
    with pytest.raises(ValueError, match="dtype: expected 'bfloat16', 'float32' or a list of them"):
        collectives.sweep(dtype=["bfloat16", "int8"])
    with pytest.raises(ValueError, match="dtype: expected"):
        collectives.torch_baselines(dtype=[])
    assert collectives.LATENCY_IMPLEMENTATIONS == ("pkit_sm_one_shot", "pkit_sm_two_shot", "pkit_ll", "nccl")


_ONE = pd.DataFrame({"implementation": ["nccl"], "op": ["all_reduce"], "dtype": ["bfloat16"], "bytes": [65536],
                     "time_median_us": [7.5], "mechanism": ["sm_push"], "bandwidth_GBps": [1.0]})


@pytest.mark.parametrize("call, text", [
    (lambda: mechanisms.best_sm_vs_ce(_ONE.assign(bytes=1 << 30)), "expected rows of mechanism 'ce'"),
    (lambda: mechanisms.small_message_times(_ONE.drop(columns="time_median_us")), "sizes: missing columns"),
    (lambda: mechanisms.split_gains(_ONE), "splits: missing columns"),
    (lambda: quickstart.summary(_ONE), "expected a row of mechanism 'ce'"),
    (lambda: collectives.table(_ONE, dtype="float32"), "dtype: no rows of 'float32'"),
    (lambda: collectives.at_size(_ONE, 4096), "nbytes: no all_reduce rows of 4096 bytes"),
    (lambda: collectives.latency_floors(_ONE), "frame: no pkit all-reduce of 65536 bytes"),
    (lambda: collectives.latency_floors(_ONE.assign(implementation="pkit_ll")), "frame: no empty_kernel"),
])
def test_analysis_tables_name_what_is_missing(call, text):
    with pytest.raises(ValueError, match=text):
        call()


def test_analysis_tables_read_the_recorded_results():
    """The notebooks' tables, from the 2xH200 records: what the text of notebooks 03 and 04 rests on."""
    load = lambda name: pkit.results.load(name, "h200x2-nv18").frame  # noqa: E731
    versus = mechanisms.best_sm_vs_ce(load("mechanisms_size_sweep"))
    assert list(versus.index) == [64 << 20 << k for k in range(5)] and (versus["ratio"] < 1).all()
    gains = mechanisms.split_gains(load("mechanisms_splits")).set_index("first")
    assert gains.loc["ce", "best_over_ce"] == 1.0 and gains.loc["sm_push", "best_over_ce"] < 1
    frame = pd.concat([load("collectives_pkit_nccl"), load("collectives_torch")], ignore_index=True)
    best = collectives.best_pkit(frame, link_GBps=450.0)
    assert len(best) == 2 * 4 * 8 and (best["speedup"] > 1).all() and best["implementation"].str.startswith("pkit").all()
    latency = pd.concat([load("collectives_latency"), load("collectives_latency_torch")], ignore_index=True)
    floors = collectives.latency_floors(latency)
    assert floors.loc["empty_kernel", "time_us"] < floors.loc["ll_smallest", "time_us"] < floors.loc["best_pkit", "time_us"]


@pytest.mark.multigpu
def test_latency_sweep_and_launch_floor():
    df = collectives.sweep(ops=["all_reduce"], sizes=[1 << 16], reps=3, calls_per_sample=5,
                           implementations=["pkit_ll", "nccl"])
    assert sorted(df["implementation"]) == ["nccl", "pkit_ll"] and (df["calls_per_sample"] == 5).all()
    assert df["verified"].all() and (df["time_median_us"] > 0).all()
    floor = collectives.launch_floor(calls_per_sample=5, reps=3)
    assert floor["implementation"].tolist() == ["empty_kernel"]
    assert 0 < floor["time_median_us"].iloc[0] < df["time_median_us"].max()


def test_speedups_against_baseline():
    frame = pd.DataFrame([
        {"implementation": "nccl", "op": "all_gather", "dtype": "bfloat16", "bytes": 1 << 30, "time_median_us": 3000.0},
        {"implementation": "pkit_ce", "op": "all_gather", "dtype": "bfloat16", "bytes": 1 << 30, "time_median_us": 2400.0},
    ])
    sp = collectives.speedups(frame).set_index("implementation")
    assert sp.loc["pkit_ce", "speedup"] == pytest.approx(1.25) and sp.loc["nccl", "speedup"] == 1.0


def test_peer_copy_rejects_unknown_mechanism():
    with pytest.raises(ValueError, match="mechanism: expected"):
        transfers.peer_copy(None, None, "carrier_pigeon")


@pytest.mark.multigpu
@pytest.mark.parametrize("mechanism", transfers.MECHANISMS)
@pytest.mark.parametrize("nbytes, blocks", [(16, None), (4096 + 48, 1), ((96 << 20) + 32, 7), (1 << 30, None)])
def test_every_mechanism_copies_every_byte(mechanism, nbytes, blocks):
    _assert_copies_every_byte(nbytes, lambda dst, src: transfers.peer_copy(dst, src, mechanism, blocks=blocks))


def _in_process(route: str, mechanism: str) -> bool:
    """Whether a test may run `mechanism` on `route` in this process: TMA to or from host memory runs only in a
    child process (test_tma_on_host_routes_in_a_child_process), so a fault there cannot end this process's
    CUDA context and every GPU test after it."""
    return not (transfers.family(mechanism) == "tma" and transfers.Route.parse(route).kind in ("h2d", "d2h"))


ROUTE_MECHANISM = [(r, m) for r in SINGLE_GPU_ROUTES for m in transfers.Route.parse(r).mechanisms if _in_process(r, m)]


@pytest.mark.gpu
@pytest.mark.parametrize("route, mechanism", ROUTE_MECHANISM)
@pytest.mark.parametrize("nbytes, blocks", [(16, None), (4096 + 48, 1), ((96 << 20) + 32, 7), (256 << 20, None)])
def test_every_single_gpu_route_and_mechanism_copies_every_byte(route, mechanism, nbytes, blocks):
    """GPU 0's local copy and pinned host memory both ways, by each mechanism the route has: fresh random
    bytes into a poisoned destination, compared byte for byte."""
    import cupy as cp

    with ExitStack() as stack:
        ((dst, src),) = peer_copies.route_pairs(route, nbytes, 1, stack)
        data = np.random.default_rng().integers(0, 256, nbytes, dtype=np.uint8)
        peer_copies.put(src, data)
        peer_copies.put(dst, 0xA5)
        pkit.synchronize([0])
        transfers.peer_copy(dst, src, mechanism, blocks=blocks)
        pkit.synchronize([0])
        got = dst if isinstance(dst, np.ndarray) else cp.asnumpy(dst)
        assert np.array_equal(got, data), (route, mechanism, nbytes)


@pytest.mark.gpu
@pytest.mark.parametrize("route", [r for r in SINGLE_GPU_ROUTES if not _in_process(r, "tma")])
def test_tma_on_host_routes_in_a_child_process(route):
    """TMA bulk copies to and from mapped host memory: verified copies and timings in a child process. If this
    fails, drop "tma" from ROUTE_MECHANISMS' h2d and d2h entries (pkit/ops/transfers.py)."""
    if "tma" not in transfers.Route.parse(route).mechanisms:
        pytest.skip(f"ROUTE_MECHANISMS leaves TMA out of {route}")
    code = ("from pkit.experiments import mechanisms as m\n"
            f"df = m.size_sweep([16, 4096 + 48, (16 << 20) + 32, 256 << 20], ['tma'], routes=[{route!r}], reps=3)\n"
            "print(df[['route', 'mechanism', 'bytes', 'bandwidth_GBps', 'verified']].to_string())\n"
            f"print(m.sm_sweep(64 << 20, [1, 8, 32], ['tma'], routes=[{route!r}], reps=3)"
            "[['route', 'mechanism', 'blocks', 'bandwidth_GBps']].to_string())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=540,
                          cwd=Path(__file__).resolve().parents[1])
    print(done.stdout, done.stderr[-4000:])
    assert done.returncode == 0, done.stderr[-4000:]


@pytest.mark.gpu
def test_mechanism_studies_on_one_gpu_return_their_rows():
    """Small sweeps of each mechanisms study on GPU 0's local and host routes (TMA on host routes: the child
    process test): rows per route and mechanism, every copy verified."""
    local, host = ["GPU0 → GPU0"], ["CPU → GPU0", "GPU0 → CPU"]
    sms = pd.concat([mechanisms.sm_sweep(64 << 20, [1, 8], routes=local, reps=3),
                     mechanisms.sm_sweep(16 << 20, [4], ["sm"], routes=host, reps=3)], ignore_index=True)
    assert list(sms.columns[:3]) == ["route", "mechanism", "blocks"] and sms["verified"].all()
    assert sms.groupby("route", sort=False)["mechanism"].apply(list).to_dict() == {
        "GPU0 → GPU0": ["ce", "sm", "sm", "tma", "tma"], "CPU → GPU0": ["ce", "sm"], "GPU0 → CPU": ["ce", "sm"]}
    need = mechanisms.sms_to_reach(sms, 0.5)
    assert set(zip(need["route"], need["mechanism"])) == {("GPU0 → GPU0", "sm"), ("GPU0 → GPU0", "tma"),
                                                         ("CPU → GPU0", "sm"), ("GPU0 → CPU", "sm")}
    sizes = pd.concat([mechanisms.size_sweep([4096, 1 << 20], routes=local, reps=3),
                       mechanisms.size_sweep([4096, 1 << 20], ["ce", "sm"], routes=host, reps=3)], ignore_index=True)
    assert len(sizes) == 2 * (3 + 2 + 2) and sizes["verified"].all() and (sizes["bandwidth_GBps"] > 0).all()
    assert mechanisms.small_message_times(sizes).index.tolist() == [(r, 4096) for r in sorted(local + host)]
    assert len(mechanisms.best_sm_vs_ce(sizes, min_bytes=1 << 20)) == 3
    if transfers.gpu_count() == 1:
        with pytest.raises(ValueError, match="split_sweep needs two"):
            mechanisms.split_sweep(1 << 20)


@pytest.mark.gpu
def test_quickstart_sweep_on_the_machines_default_route():
    df = quickstart.peer_copy_sweep(pkit.compile("copy.cu", "copy16"), [4096, 1 << 20], reps=3, warmup=1)
    route = transfers.default_route()
    assert set(df["route"]) == {route.label} and df["verified"].all()
    assert df["mechanism"].tolist() == transfers.expand(route, ["sm", "ce"]) * 2
    summary = quickstart.summary(df)
    assert summary["route"].tolist() == [route.label] * len(transfers.expand(route, ["sm", "ce"]))
    assert summary.loc[summary["mechanism"] == "ce", "vs_ce"].tolist() == [1.0]


def _assert_copies_every_byte(nbytes: int, copy) -> None:
    """`copy(dst, src)` from GPU 0 to GPU 1 moves `nbytes` fresh random bytes into a poisoned buffer."""
    import cupy as cp

    team = pkit.Team([0, 1])
    src, dst = team.empty((nbytes,), "uint8"), team.empty((nbytes,), "uint8")
    data = np.random.default_rng().integers(0, 256, nbytes, dtype=np.uint8)
    src[0].set(data)
    dst.fill(0xA5)
    team.synchronize()
    copy(dst[1], src[0])
    team.synchronize()
    assert np.array_equal(cp.asnumpy(dst[1]), data)


def _stand_in(device: int, nbytes: int = 64):
    from types import SimpleNamespace

    return SimpleNamespace(device=SimpleNamespace(id=device), nbytes=nbytes)


@pytest.mark.parametrize("first, second, fraction, text", [
    ("warp_drive", "sm_pull", 0.5, "first: expected"),
    ("sm_push", "carrier_pigeon", 0.5, "second: expected"),
    ("sm_push", "sm_pull", 1.5, r"fraction: expected a share of the bytes in \[0, 1\]"),
    ("ce", "sm_push", 0.5, "different GPUs, both run on GPU 0"),
    ("sm_pull", "tma_pull", 0.5, "different GPUs, both run on GPU 1"),
])
def test_split_copy_checks_arguments_before_any_work(first, second, fraction, text):
    pytest.importorskip("cupy")
    with pytest.raises(ValueError, match=text):
        transfers.split_copy(_stand_in(1), _stand_in(0), first, second, fraction)


def test_split_sweep_validates_arguments():
    with pytest.raises(ValueError, match="fractions"):
        mechanisms.split_sweep(fractions=[0.5, 2.0])
    with pytest.raises(ValueError, match="mechanisms: unknown"):
        mechanisms.split_sweep(pairs=[("sm_push", "telepathy")])
    with pytest.raises(ValueError, match="mechanisms: unknown"):
        mechanisms.split_sweep(pairs=[("sm", "ce")])  # split_copy needs GPU-naming (peer) mechanisms


@pytest.mark.multigpu
@pytest.mark.parametrize("first, second", mechanisms.SPLITS + (("tma_push", "tma_pull"),))
@pytest.mark.parametrize("nbytes, fraction", [(16, 0.5), (4096 + 48, 0.3), ((64 << 20) + 32, 0.75), (1 << 20, 0.0),
                                              (1 << 20, 1.0)])
def test_split_copy_copies_every_byte(first, second, nbytes, fraction):
    _assert_copies_every_byte(nbytes, lambda dst, src: transfers.split_copy(dst, src, first, second, fraction))


@pytest.mark.multigpu
def test_split_copy_is_joined_on_the_first_gpu():
    """A timer on the first GPU's stream must cover the second GPU's part: a pull that waits behind a 2 ms
    spin on GPU 1 makes the call on GPU 0 last at least that long."""
    import cupy as cp

    team = pkit.Team([0, 1])
    nbytes = 1 << 20
    src, dst = team.empty((nbytes,), "uint8"), team.empty((nbytes,), "uint8")
    spin = pkit.compile("spin.cu", "spin_ns")

    def call():
        spin((1,), (1,), (np.uint64(2_000_000),), device=1)
        transfers.split_copy(dst[1], src[0], "sm_push", "sm_pull", 0.5)

    result = pkit.bench(call, devices=[0], warmup=1, reps=5)
    assert result.median_ms >= 2.0
    assert cp.cuda.get_current_stream() == cp.cuda.Stream.null
