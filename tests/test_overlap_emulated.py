"""The one-GPU emulation of a rank's overlap: pacing logic on CPU, the paced copy and a tiny study on a GPU."""
import pytest

from pkit.experiments.overlap import emulated as E
from pkit.experiments.overlap import pacing as P


class FakeClock:
    """A clock that moves `step` seconds each time it is read (a host busy-waiting on it gets there)."""

    def __init__(self, step=1e-7):
        self.now, self.step = 0.0, step

    def __call__(self):
        self.now += self.step
        return self.now


class FakeGate:
    """A gate that records what waits on which ticket and what the host opened, in order."""

    def __init__(self):
        self.issued, self.forced, self.log = 0, False, []

    def next_ticket(self):
        self.issued += 1
        return self.issued

    def wait(self, stream, ticket):
        self.log.append(("wait", stream, ticket))

    def open(self, ticket):
        self.log.append(("open", ticket))

    def watch(self):
        self.log.append(("watch",))

    def settle(self):
        self.log.append(("settle", self.issued))


def test_pieces_are_released_when_the_link_would_have_delivered_them():
    sent = []
    pacer = P.Pacer(100e9, clock=FakeClock(), enqueue=lambda d, s, n, st: sent.append((d, s, n)), gate=None,
                    events=False)
    pacer.begin()
    pacer.copy(1000, 5000, 10 << 20, stream=None)
    pacer.copy(0, 0, 4 << 20, stream=None)  # a second copy in the same call continues the link's clock
    assert sent[:0] == [] and pacer.releases == []  # enqueued, nothing released yet
    pacer.release()
    piece = P.piece_bytes(100e9)
    first = sent[:len(P.split(10 << 20, piece))]
    assert [n for _, _, n in first] == P.split(10 << 20, piece) and pacer.moved == 14 << 20
    assert [d - 1000 for d, _, _ in first] == [s - 5000 for _, s, _ in first] == list(range(0, 10 << 20, piece))
    done = 0
    for at, n in pacer.releases:
        done += n
        assert done / 100e9 <= at <= done / 100e9 + 1e-6  # never early, and on time
    assert pacer.releases[-1][0] >= (14 << 20) / 100e9


def test_every_piece_waits_for_its_own_ticket_and_the_call_for_the_start():
    gate, sent = FakeGate(), []
    pacer = P.Pacer(100e9, clock=FakeClock(), enqueue=lambda d, s, n, st: sent.append(st), gate=gate, events=False)
    pacer.begin("main")
    pacer.copy(0, 0, 3 * P.piece_bytes(100e9), stream="side")
    assert gate.log == [("wait", "main", 1), ("watch",), ("wait", "side", 2), ("wait", "side", 3),
                        ("wait", "side", 4)]  # the call waits for the start, each piece for its ticket
    pacer.release()
    assert gate.log[5:] == [("open", 1), ("open", 2), ("open", 3), ("open", 4), ("settle", 4)]
    pacer.begin("main")  # the next call's tickets come after
    assert gate.log[-2] == ("wait", "main", 5) and not pacer.forced


def test_a_copy_goes_over_the_link_only_once_its_stream_reaches_it():
    """A reduce-scatter queued after a GEMM: its pieces are paced from when the GEMM is done, not from the start."""
    clock, gate = FakeClock(), FakeGate()

    class Reached:
        def __init__(self, at):
            self.at = at

        @property
        def done(self):
            return clock() >= self.at  # the host polls: its clock moves

    pacer = P.Pacer(100e9, clock=clock, enqueue=lambda *a: None, gate=gate)
    marks = iter([Reached(0.0), None, None, Reached(1e-3), None])  # reached and end events, as recorded
    pacer._event = lambda stream: next(marks)
    pacer.begin("main")
    piece, link = P.piece_bytes(100e9), P.piece_bytes(100e9) / 100e9
    pacer.copy(0, 0, 2 * piece, stream="main")
    pacer.copy(0, 0, piece, stream="main")  # right behind it on its stream: follows it over the link
    pacer.copy(0, 0, 2 * piece, stream="side")  # the side stream reaches its copy after 1 ms (a GEMM before it)
    pacer.release()
    at = [t for t, _ in pacer.releases]
    assert at[:3] == pytest.approx([link, 2 * link, 3 * link], abs=1e-6)  # from the start, back to back
    assert at[3:] == pytest.approx([1e-3 + link, 1e-3 + 2 * link], abs=1e-6)


def test_a_late_host_catches_up_at_once_and_the_average_holds():
    clock = FakeClock()
    pacer = P.Pacer(50e9, clock=clock, enqueue=lambda *a: None, gate=None, events=False)
    pacer.begin()
    pacer.copy(0, 0, 80 << 20, stream=None)
    late = iter([0.0, 1e-3])  # the host is busy for 1 ms right after the start: 50 MB were due

    def stalled():
        clock.now += next(late, 0.0)
        return clock()

    pacer.clock = stalled
    pacer.release()
    due_by_then = [at for at, _ in pacer.releases if at < 1.01e-3]
    assert len(due_by_then) >= int(50e9 * 1e-3) // P.piece_bytes(50e9) - 1  # those due: released back to back
    assert pacer.releases[-1][0] == pytest.approx((80 << 20) / 50e9, rel=1e-3)


def test_pieces_and_links_are_checked():
    assert P.piece_bytes(1e9) == P.MIN_PIECE and P.piece_bytes(1e12) % 16 == 0
    assert sum(P.split(123456, 1000)) == 123456 and P.split(0, 10) == []
    with pytest.raises(ValueError, match="rate_Bps: expected a positive rate"):
        P.piece_bytes(0)
    with pytest.raises(ValueError, match="link: expected 'h200x2', 'h200x8', 'pcie' or a positive rate"):
        E.link_rate("carrier pigeon")
    rate, source = E.link_rate("h200x2")
    assert 300 < rate < 450 and "results/h200x2-nv18/mechanisms_size_sweep" in source  # the recorded rate, not typed
    assert "datasheet" in E.link_rate("h200x8")[1] and "PCIe" in E.link_rate("pcie")[1]


@pytest.mark.gpu
def test_the_paced_copy_alone_holds_the_asked_rate():
    checks = E.link_checks(links=("h200x2", 100.0), nbytes=256 << 20, reps=3)
    print(checks.round(3).to_string())
    assert checks["verified"].all()
    assert ((checks["held"] - 1).abs() <= 0.10).all(), checks
    assert (checks["hbm_bytes_per_byte"].dropna().between(1.8, 2.2)).all()  # a local copy reads and writes each byte


@pytest.mark.gpu
def test_the_emulated_study_runs_on_a_tiny_shape(monkeypatch):
    monkeypatch.setattr(E.M, "shape_of", lambda pattern, inner, gpus, m=2048, k=1024, n=1024:
                        (m, k, inner) if E.PATTERNS[pattern].flow == "in" else (m, inner * gpus, n))
    frame = E.emulated(links=(200.0,), world_sizes=(2,), inner=(256,), rounds=2)
    print(frame.round(3).to_string())
    beside = P.copies_beside_full_gpu(0)["beside"]
    for pattern in E.M.PATTERN_NAMES:
        expected = [s for s in E.PATTERNS[pattern].names if beside or s != "ce_flags"]  # ce_flags needs copies beside
        assert list(frame.loc[frame["pattern"] == pattern, "schedule"]) == expected
    gather = frame[frame["pattern"] == "ag_gemm"]
    assert gather["verified"].all() and (frame["time_median_us"] > 0).all()
    serial = frame[frame["schedule"] == "serial"]
    assert (serial["speedup_vs_serial"] == 1).all() and serial["faithful"].all()
    assert not frame.loc[frame["schedule"].isin(["sm_pull", "tma_pull", "tma_add"]), "faithful"].any()


def test_the_paced_copy_asks_the_driver_to_keep_it_off_the_sms(monkeypatch):
    """A copy within one GPU by plain cudaMemcpyAsync may run as a kernel, which never gets an SM beside ce_flags'
    persistent GEMM (it holds them all, waiting for the copy's flag): each piece goes by cuMemcpyBatchAsync with
    CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE, its attributes laid out as cuda.h's CUmemcpyAttributes_v1."""
    import ctypes

    from pkit import driver

    attrs = driver._MemcpyAttributes
    assert ctypes.sizeof(attrs) == 24
    assert [attrs.srcAccessOrder.offset, attrs.srcLocHint.offset, attrs.dstLocHint.offset, attrs.flags.offset] == \
        [0, 4, 12, 20]
    for fail_index in (False, True):
        calls = []

        def batch(*args):
            calls.append(args)
            return 0

        monkeypatch.setattr(driver, "_batch_copy", lambda: (batch, fail_index))
        driver.memcpy_beside_compute(0x7000, 0x9000, 12345, stream=0xABC, device=3)
        (args,) = calls
        dsts, srcs, sizes, count, attr, first, num_attrs = args[:7]
        given = ctypes.cast(attr, ctypes.POINTER(attrs)).contents
        assert (dsts[0], srcs[0], sizes[0], count, first[0], num_attrs) == (0x7000, 0x9000, 12345, 1, 0, 1)
        assert given.flags == driver.MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE == 1
        assert given.srcAccessOrder == driver.MEMCPY_SRC_ACCESS_ORDER_STREAM == 1
        assert (given.dstLocHint.type, given.dstLocHint.id) == (driver.MEM_LOCATION_TYPE_DEVICE, 3)
        assert len(args) == (9 if fail_index else 8) and args[-1].value == 0xABC  # the stream comes last
    with pytest.raises(ValueError, match="legacy default stream"):
        driver.memcpy_beside_compute(0x7000, 0x9000, 16, stream=0, device=0)
    monkeypatch.setattr(driver, "_batch_copy", lambda: None)
    with pytest.raises(RuntimeError, match="no cuMemcpyBatchAsync"):
        driver.memcpy_beside_compute(0x7000, 0x9000, 16, stream=1, device=0)


@pytest.mark.gpu
def test_the_beside_check_tells_a_copy_that_needs_an_sm_from_one_that_does_not():
    """The check holds every SM with pkit's GEMM: a stream's flag write (the stream's front end, no SM) is done
    beside it, an SM copy kernel only once the GEMM lets go; the Pacer's own copy is measured, whatever it is."""
    import cupy as cp

    from pkit.driver import stream_write_value32
    from pkit.ops.transfers import peer_copy

    word = cp.zeros(1, dtype=cp.uint32)
    no_sm = P.copies_beside_full_gpu(0, copy=lambda d, s, n, st: stream_write_value32(st.ptr, word.data.ptr, 1),
                                     remeasure=True)

    def sm_copy(dst, src, nbytes, stream):
        with stream:
            peer_copy(cp.ndarray(nbytes, cp.uint8, cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(dst, nbytes, None), 0)),
                      cp.ndarray(nbytes, cp.uint8, cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(src, nbytes, None), 0)),
                      "sm", 16)

    needs_sm = P.copies_beside_full_gpu(0, copy=sm_copy, remeasure=True)
    pacer = P.copies_beside_full_gpu(0, remeasure=True)
    print(no_sm, needs_sm, pacer)
    assert no_sm["beside"] and no_sm["copy_ms"] < no_sm["hold_ms"] / 2
    assert not needs_sm["beside"] and needs_sm["copy_ms"] >= needs_sm["hold_ms"] / 2
    assert pacer["beside"] == (pacer["copy_ms"] < pacer["hold_ms"] / 2)


def test_the_figure_shows_every_point_and_marks_the_loose_ones_above_its_axis():
    """The axis holds the model's curves and the faithful points; a hollow (not faithful) point above it is drawn as a
    triangle along its top, never left out of the panel."""
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    from pkit.experiments.overlap import emulated_draw

    table = pd.DataFrame({"link_GBps": 396.0, "gpus": 2, "pattern": "ag_gemm", "schedule": "sm_pull",
                          "inner": [256, 512, 1024], "model_fraction": [0.8, 0.9, 0.7],
                          "fraction_of_bound": [1.3, 4.5, 0.6], "faithful": [True, False, False]})
    ax = emulated_draw.draw(table).axes[0]
    low, high = ax.get_ylim()
    assert low == 0 and 1.3 < high < 4.5
    drawn = {"o": [], "^": []}
    for line in ax.lines:
        if line.get_marker() in drawn:
            drawn[line.get_marker()] += [(float(x), float(y)) for x, y in zip(line.get_xdata(), line.get_ydata())]
    assert sorted(drawn["o"]) == [(256, 1.3), (1024, 0.6)]
    assert drawn["^"] == [(512, pytest.approx(high / 1.05))]
