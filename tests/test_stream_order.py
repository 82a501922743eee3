"""Cross-GPU stream ordering on CPU (pkit.team.order_streams, Team.fork, join and meet): CuPy's devices, streams and
events replaced by stand-ins that log each record and wait, so the order is checked without a GPU; argument errors."""
import pytest

import pkit
from pkit.team import Team, order_streams


class _Cuda:
    """Stands for cupy.cuda: the current device, a current stream per device, events that log where they are
    recorded (on the device current when they were made) and streams that log what they wait on."""

    def __init__(self):
        self.log, self.device, self.made = [], None, 0
        cuda = self

        class Device:
            def __init__(self, device):
                self.id = device

            def __enter__(self):
                self.previous, cuda.device = cuda.device, self.id

            def __exit__(self, *_):
                cuda.device = self.previous

        class Event:
            def __init__(self, disable_timing=False):
                self.device, self.name = cuda.device, f"e{cuda.made}"
                cuda.made += 1

            def record(self, stream=None):
                stream = stream or cuda.get_current_stream()
                assert stream.device == self.device, "an event is recorded on a stream of its own GPU"
                cuda.log.append(("record", self.name, stream.name))

        self.Device, self.Event = Device, Event

    def get_current_stream(self):
        return _Stream(f"current{self.device}", self.device, self)


class _Stream:
    def __init__(self, name, device, cuda):
        self.name, self.device, self.cuda = name, device, cuda

    def wait_event(self, event):
        self.cuda.log.append(("wait", self.name, event.name))


@pytest.fixture
def cuda(monkeypatch):
    import cupy

    fake = _Cuda()
    for name in ("Device", "Event", "get_current_stream"):
        monkeypatch.setattr(cupy.cuda, name, getattr(fake, name))
    return fake


def team_of(devices, rank=None) -> Team:
    """A Team over `devices` without touching a GPU (what fork, join and meet read of it)."""
    team = Team.__new__(Team)
    team.devices, team.size, team.rank = tuple(devices), len(devices), rank
    return team


def waits(log) -> set:
    """(waiting stream, stream waited for) pairs, through the events recorded."""
    recorded_on = {event: stream for kind, event, stream in log if kind == "record"}
    return {(stream, recorded_on[event]) for kind, stream, event in log if kind == "wait"}


def test_order_streams_records_once_per_stream_then_every_waiter_waits_on_all(cuda):
    side = _Stream("side1", 1, cuda)
    order_streams(after=[(0, None), (1, side)], waiting=[(1, None), (2, None)])
    assert [entry[0] for entry in cuda.log] == ["record"] * 2 + ["wait"] * 4  # nothing waits before all are recorded
    assert waits(cuda.log) == {("current1", "current0"), ("current1", "side1"), ("current2", "current0"),
                               ("current2", "side1")}


def test_fork_then_join_bracket_the_side_streams(cuda):
    team = team_of([0, 1])
    side = [_Stream("side0", 0, cuda), _Stream("side1", 1, cuda)]
    team.fork(side)
    assert waits(cuda.log) == {(s, c) for s in ("side0", "side1") for c in ("current0", "current1")}
    cuda.log.clear()
    team.join(side)
    assert waits(cuda.log) == {(c, s) for s in ("side0", "side1") for c in ("current0", "current1")}
    cuda.log.clear()
    push, gather = side, [_Stream("gather0", 0, cuda), _Stream("gather1", 1, cuda)]
    team.join(push, gather)  # several lanes: every current stream waits for every one of their streams
    assert {s for _, s in waits(cuda.log)} == {"side0", "side1", "gather0", "gather1"} and len(waits(cuda.log)) == 8


def test_meet_orders_every_current_stream_after_every_other(cuda):
    team_of([0, 1, 2]).meet()
    assert waits(cuda.log) == {(f"current{a}", f"current{b}") for a in range(3) for b in range(3)}


def test_fork_and_join_check_their_lanes_and_the_team(cuda):
    team = team_of([0, 1])
    with pytest.raises(ValueError, match=r"lanes: fork expected one stream per rank \(2\), got a lane of 1"):
        team.fork([_Stream("side0", 0, cuda)])
    with pytest.raises(ValueError, match="lanes: join expected at least one lane"):
        team.join()
    with pytest.raises(pkit.PkitError, match="team: meet orders the streams of every rank's GPU.*rank 1 only"):
        team_of([0, 1], rank=1).meet()
    assert cuda.log == []  # nothing recorded before an argument error
