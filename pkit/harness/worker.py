"""One rank of an evaluation: `python -m pkit.harness.worker SPEC.json RANK FD`.

The evaluating process (pkit.harness.launch) writes SPEC.json and starts one worker per rank, handing it
one end of a socket pair (descriptor FD). A worker joins the default process group at the file the spec
names as `rendezvous` (gloo on the CPU; on GPUs NCCL after `torch.cuda.set_device(rank)`), loads the problem, and then
serves commands from the parent until `quit`:

| command | does | answers |
| --- | --- | --- |
| `trials` seeds | per seed: fresh inputs, one call, outputs and inputs saved for the parent; waits for its verdict | `trial` per seed, `trials_done` |
| `plan` seed, iters | builds one input set, measures its size and build time | `plan` with the number of timed input sets |
| `warmup` n | n calls on copies of the last trial's inputs | `warm` |
| `time` seeds, iters, inplace, tolerance, tag, save | builds one input set per seed (says `built`), then `iters` timed calls rotating over them, each on its set changed with the seed the parent sent with the call (`go` for the first, each `keep` answer for the next; pkit.harness.fresh), the change made and undone outside the timed sample; after each call sends its time and the output's `fingerprint_check` under `tolerance` (the reference's is what the candidate's calls are checked against, the candidate's fingerprint is its `want`) and asks whether to keep the whole output (copied on the device; saved after the window as `<tag>_timed<i>` when `save`) | `built`, `called` per call, `timed` with samples (ms), `saved` |

Its role is `reference` (the problem's reference; never imports a candidate) or `candidate` (imports the
candidate file after the timer has bound its clocks). The worker judges nothing: outputs go to files in the
run folder that the parent reads (pkit.harness.snapshot) and compares (pkit.harness.checks). Errors are
sent as an `error` message, then the worker exits at once (a peer may be stuck in a collective); the parent
kills what is left.
"""
from __future__ import annotations

import datetime
import gc
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

from ..errors import CompileError, PkitError
from . import snapshot
from .channel import WorkerEnd
from .checks import aliased_paths, clone_tree, fingerprint_check, leaves
from .contain import make_undumpable
from .fresh import FreshSet
from .placement import own_pages_per_set, placed
from .problems import load_module, open_source
from .timer import clock, input_bytes, l2_rotations, synchronize, timed_call

FRESH_BYTES = {"cuda": 4 << 30, "cpu": 512 << 20}
"""Most bytes of distinct timed input sets held at once, by device kind."""
FRESH_SECONDS = 3.0
"""Most seconds spent building timed input sets (more sets are built while they fit both budgets)."""
MIN_SETS = 4
"""Timed input sets built even past FRESH_SECONDS (within FRESH_BYTES)."""


class MissingFunction(PkitError):
    """The candidate file defines no callable with the expected name (e.g. `solution`)."""


COMPILE_ERRORS = (SyntaxError, ImportError, MissingFunction, CompileError)
"""Exceptions that mean the candidate could not be built or loaded (status `compile_error`)."""


def error_kind(exc: BaseException, phase: str) -> str:
    """`compile_error` for a candidate that failed to build or load, else `runtime_error`."""
    if isinstance(exc, CompileError) or "Error building extension" in str(exc):
        return "compile_error"
    if phase == "load_candidate" and isinstance(exc, COMPILE_ERRORS):
        return "compile_error"
    return "runtime_error"


PEER_FAILURE_MARKERS = ("connection closed by peer", "connection reset by peer", "read error", "broken pipe",
                        "remote process exited", "communicator was aborted", "distnetworkerror", "distbackenderror")
"""Lower-case fragments of errors a rank gets because a peer died, rather than from its own candidate code."""


def is_peer_failure(exc: BaseException) -> bool:
    """True when `exc` looks like the echo of another rank's failure (its connection went away)."""
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(marker in text for marker in PEER_FAILURE_MARKERS)


def timed_set_count(set_bytes: int, build_s: float, device: torch.device, iters: int,
                    budget_bytes: int | None = None) -> int:
    """How many distinct input sets the timed calls rotate over: one per call while they fit the byte budget
    (`budget_bytes`, None: FRESH_BYTES of the device's kind) and FRESH_SECONDS; never fewer than MIN_SETS while
    they fit the byte budget (first uses are compared with reuses, see integrity.timing_mismatch), nor than two,
    nor than the L2 needs; never more than `iters`."""
    in_bytes = (FRESH_BYTES[device.type] if budget_bytes is None else budget_bytes) // max(set_bytes, 1)
    fits = min(in_bytes, int(FRESH_SECONDS / max(build_s, 1e-6)))
    return max(1, min(iters, max(2, min(MIN_SETS, in_bytes), l2_rotations(set_bytes, device), fits)))


def load_candidate(path: str, function: str):
    """The callable `function` of the Python file at `path` (its folder goes on sys.path for helpers)."""
    folder = str(Path(path).parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    module = load_module(Path(path), "pkit_candidate")
    fn = getattr(module, function, None)
    if not callable(fn):
        raise MissingFunction(f"{path} defines no callable {function!r} (the candidate contract)")
    return fn


def share_process_groups() -> None:
    """Make `dist.new_group` return the same group for the same arguments, so input builders that create
    groups (PKB's) can be called once per timed input set without a new communicator each time."""
    original, made = dist.new_group, {}

    def new_group(ranks=None, *args, **kwargs):
        key = (tuple(ranks) if ranks is not None else None, repr(args), repr(sorted(kwargs.items())))
        if key not in made:
            made[key] = original(ranks, *args, **kwargs)
        return made[key]

    dist.new_group = new_group


def join_group(rank: int, world_size: int, device_kind: str, timeout_s: float, rendezvous: str) -> torch.device:
    """Initialise the default process group, the ranks meeting at the file `rendezvous`; returns this rank's
    device. On the CPU a rank computes on one intra-op thread (torchrun's default for several processes): threads
    of processes sharing the cores would otherwise time each other's scheduling rather than the call."""
    timeout = datetime.timedelta(seconds=timeout_s)
    if device_kind == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        dist.init_process_group("nccl", init_method=f"file://{rendezvous}", rank=rank, world_size=world_size,
                                timeout=timeout, device_id=device)
    else:
        torch.set_num_threads(1)
        own_pages_per_set()  # host memory placed anew for each window's sets in every role (pkit.harness.placement)
        device = torch.device("cpu")
        dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world_size,
                                timeout=timeout)
    return device


def side_stream_check(out, device: torch.device) -> bool:
    """True when `out` changed after the current stream was done, i.e. it was written on another stream."""
    if device.type != "cuda":
        return False
    torch.cuda.current_stream(device).synchronize()
    snap = clone_tree(out)
    synchronize(device)
    return any(isinstance(a, torch.Tensor) and not torch.equal(a, b)
               for (_, a), (_, b) in zip(leaves(out), leaves(snap)))


def release_memory(device: torch.device) -> None:
    """Hand cached GPU memory back, so an idle reference worker does not hold what a candidate needs."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


class Worker:
    """One rank's state and its command handlers."""

    def __init__(self, spec: dict, rank: int, channel: WorkerEnd):
        self.spec, self.rank, self.channel = spec, rank, channel
        self.folder = Path(spec["folder"])
        self.fn = None
        self.last_inputs = None
        self.phase = "init"
        self.cores = sorted(os.sched_getaffinity(0))

    def enter(self, phase: str) -> None:
        self.phase = phase
        self.channel.send({"op": "phase", "name": phase})

    def file(self, tag: str) -> str:
        return str(self.folder / f"{self.spec['role']}{self.rank}_{tag}.pt")

    def inputs(self, seed: int) -> tuple:
        spec = self.spec
        made = self.problem.make_inputs(self.rank, spec["world_size"], spec["size"], spec["dtype"], seed,
                                        device=str(self.device))
        return made if isinstance(made, tuple) else (made,)

    def start(self) -> None:
        spec = self.spec
        if spec["role"] == "reference":
            make_undumpable()
        share_process_groups()
        self.device = join_group(self.rank, spec["world_size"], spec["device"], spec["pg_timeout_s"],
                                 spec["rendezvous"])
        self.enter("load_problem")
        self.problem = open_source(spec["source"])
        if spec["role"] == "reference":
            self.fn = self.problem.reference
        else:
            self.enter("load_candidate")
            self.fn = load_candidate(spec["candidate"]["path"], spec["candidate"]["function"])
        self.channel.send({"op": "ready"})

    def serve(self) -> None:
        handlers = {"trials": self.trials, "plan": self.plan, "warmup": self.warmup, "time": self.time}
        while True:
            message = self.channel.recv()
            if message["op"] == "quit":
                return
            handlers[message["op"]](message)

    def trials(self, message: dict) -> None:
        for t, seed in enumerate(message["seeds"]):
            self.enter(f"inputs, trial {t}")
            inputs = self.inputs(seed)
            if self.spec["role"] == "reference":
                snapshot.save(self.file(f"trial{t}_before"), inputs, snapshot.DIGEST_BYTES)
            self.enter(f"{self.spec['role']}, trial {t}")
            out = self.fn(*inputs)
            side = side_stream_check(out, self.device)
            synchronize(self.device)
            self.enter(f"save, trial {t}")
            snapshot.save(self.file(f"trial{t}_out"), out)
            snapshot.save(self.file(f"trial{t}_after"), inputs, snapshot.DIGEST_BYTES)
            self.last_inputs = inputs
            self.channel.send({"op": "trial", "trial": t, "side_stream": side,
                               "aliases": aliased_paths(out, inputs)})
            verdict = self.channel.recv()
            if not verdict.get("go"):
                break
        self.channel.send({"op": "trials_done"})

    def plan(self, message: dict) -> None:
        self.enter("plan")
        start = clock()
        inputs = self.inputs(message["seed"])
        synchronize(self.device)
        build_s = clock() - start
        sets = timed_set_count(input_bytes(inputs), build_s, self.device, message["iters"],
                               self.spec.get("fresh_bytes"))
        self.channel.send({"op": "plan", "sets": sets, "set_bytes": input_bytes(inputs), "build_s": build_s})

    def warmup(self, message: dict) -> None:
        self.enter(f"warmup_{self.spec['role']}")
        for _ in range(message["n"]):
            self.fn(*clone_tree(self.last_inputs))
        synchronize(self.device)
        self.channel.send({"op": "warm"})

    def time(self, message: dict) -> None:
        role = self.spec["role"]
        self.last_inputs = None  # warm-up is over: free the trial inputs before building the timed sets
        self.enter(f"timing_{role}, building inputs")
        inplace, tolerance = set(message.get("inplace", ())), message.get("tolerance") or {}
        sets = placed(lambda: [FreshSet(self.problem, self.inputs(seed), inplace) for seed in message["seeds"]],
                      self.device, self.cores)  # a new core and new memory for this window
        self.channel.send({"op": "built"})
        fresh = self.channel.recv()["fresh"]  # the first call's change: revealed once every rank's sets are built
        self.enter(f"timing_{role}")
        samples, kept = [], {}
        gc.disable()  # the harness's own garbage never gets collected inside a sample
        for i in range(message["iters"]):
            current = sets[i % len(sets)]
            out, ms = timed_call(self.fn, current.prepare(fresh), self.device, self.spec["world_size"])
            samples.append(ms)
            self.channel.send({"op": "called", "i": i, "ms": ms, "check": fingerprint_check(out, **tolerance)})
            answer = self.channel.recv()
            if answer.get("keep"):
                kept[i] = clone_tree(out)  # a device copy now; written to disk once the window has closed
            del out
            current.revert()
            fresh = answer.get("fresh")  # the next call's change
        gc.enable()
        del sets
        self.channel.send({"op": "timed", "samples_ms": samples})
        for i, out in kept.items() if message["save"] else ():
            snapshot.save(self.file(f"{message['tag']}_timed{i}"), out)
        del kept
        release_memory(self.device)
        self.channel.send({"op": "saved"})


def main(argv: list[str] | None = None) -> int:
    import json

    spec_path, rank, fd = argv if argv is not None else sys.argv[1:]
    channel = WorkerEnd(int(fd))
    worker = Worker(json.loads(Path(spec_path).read_text()), int(rank), channel)
    try:
        worker.start()
        worker.serve()
    except BaseException as exc:  # noqa: BLE001 - every failure is a result to report
        try:
            channel.send({"op": "error", "kind": error_kind(exc, worker.phase), "phase": worker.phase,
                          "type": type(exc).__name__, "message": str(exc)[:4000],
                          "traceback": traceback.format_exc()[-8000:], "peer_failure": is_peer_failure(exc),
                          "time": time.time()})
        except OSError:
            pass
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # threads a candidate left running must not keep the worker alive


if __name__ == "__main__":
    sys.exit(main())
