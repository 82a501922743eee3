"""One rank of one candidate's evaluation: `python -m pkit.harness.worker SPEC.json RANK`.

The parent (`pkit.harness.launch`) writes SPEC.json and starts one such process per rank, with
MASTER_ADDR/MASTER_PORT set. The worker joins the default process group (gloo on the CPU; on GPUs NCCL
after `torch.cuda.set_device(rank)`), loads the problem and the candidate, and for each trial builds fresh
seeded inputs, runs the reference and the candidate on their own copies and checks the candidate's output
(`pkit.harness.checks`). When every rank passed every trial it times both (`pkit.harness.timer`).
It writes `rank_<RANK>.json` next to SPEC.json: the per-trial checks, the timing samples (ms), or the
error with the phase it happened in. After an error it exits at once (code 1) without leaving the process
group, since a peer may be stuck in a collective; the parent kills what is left.
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

from ..errors import CompileError, PkitError
from .checks import RankCheck, clone_tree, compare, leaves
from .problems import load_module, open_source
from .timer import synchronize, time_calls


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


def join_group(rank: int, world_size: int, device_kind: str, timeout_s: float) -> torch.device:
    """Initialise the default process group; returns this rank's device."""
    timeout = datetime.timedelta(seconds=timeout_s)
    if device_kind == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        dist.init_process_group("nccl", rank=rank, world_size=world_size, timeout=timeout, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timeout)
    return device


def all_ranks_ok(ok: bool, device: torch.device) -> bool:
    """True when `ok` holds on every rank (a collective call)."""
    flag = torch.tensor([1 if ok else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def side_stream_check(out, device: torch.device) -> bool:
    """True when `out` changed after the current stream was done, i.e. it was written on another stream."""
    if device.type != "cuda":
        return False
    torch.cuda.current_stream(device).synchronize()
    snapshot = clone_tree(out)
    torch.cuda.synchronize(device)
    return any(isinstance(a, torch.Tensor) and not torch.equal(a, b)
               for (_, a), (_, b) in zip(leaves(out), leaves(snapshot)))


class Run:
    """The state of one rank's evaluation; `phase` names what it is doing, for error reports.

    Each phase change is also written to `rank_<RANK>.phase`, so after a timeout the parent can say where
    every rank was stuck.
    """

    def __init__(self, spec: dict, rank: int, folder: Path):
        self.spec, self.rank = spec, rank
        self._phase_file = folder / f"rank_{rank}.phase"
        self.result = {"rank": rank, "error": None, "trials": [], "passed": False, "timing": None}
        self.phase = "init"

    @property
    def phase(self) -> str:
        return self._phase

    @phase.setter
    def phase(self, name: str) -> None:
        self._phase = name
        self._phase_file.write_text(f"{name}, trial {len(self.result['trials'])}")

    def execute(self) -> None:
        spec = self.spec
        ws = spec["world_size"]
        device = join_group(self.rank, ws, spec["device"], spec["pg_timeout_s"])
        self.result["device"] = str(device)
        self.phase = "load_problem"
        problem = open_source(spec["source"])
        self.phase = "load_candidate"
        candidate = load_candidate(spec["candidate"]["path"], spec["candidate"]["function"])
        passed, inputs = True, ()
        for trial in range(spec["trials"]):
            seed = spec["seed"] + trial
            self.phase = "inputs"
            inputs = problem.make_inputs(self.rank, ws, spec["size"], spec["dtype"], seed, device=str(device))
            inputs = inputs if isinstance(inputs, tuple) else (inputs,)
            pristine, ref_in, sol_in = clone_tree(inputs), clone_tree(inputs), clone_tree(inputs)
            self.phase = "reference"
            ref_out = problem.reference(*ref_in)
            synchronize(device)
            self.phase = "candidate"
            sol_out = candidate(*sol_in)
            side_stream = side_stream_check(sol_out, device)
            synchronize(device)
            self.phase = "check"
            check = compare(ref_out, sol_out, ref_inputs=ref_in, sol_inputs=sol_in, pristine=pristine,
                            atol=spec["atol"], rtol=spec["rtol"])
            if side_stream:
                check = _with_side_stream(check)
            self.result["trials"].append({"trial": trial, "seed": seed, "check": check.to_dict(self.rank)})
            if not all_ranks_ok(check.ok, device):
                passed = False
                break
        self.result["passed"] = passed
        if passed:
            timing = spec["timing"]
            self.phase = "timing_reference"
            ref_ms, groups = time_calls(problem.reference, clone_tree(inputs), device=device, **timing)
            self.phase = "timing_candidate"
            sol_ms, _ = time_calls(candidate, clone_tree(inputs), device=device, **timing)
            self.result["timing"] = {"ref_ms": ref_ms, "sol_ms": sol_ms, "rotations": groups, **timing}
        self.phase = "done"


def _with_side_stream(check: RankCheck) -> RankCheck:
    check.ok = False
    check.flags = sorted({*check.flags, "side_stream"})
    note = "output still changed after the current stream finished: work on a side stream not joined back"
    check.note = f"{check.note}; {note}" if check.note else note
    return check


def write_result(folder: Path, rank: int, result: dict) -> None:
    """Write `rank_<rank>.json` atomically (the parent reads only complete files)."""
    tmp = folder / f"rank_{rank}.json.tmp"
    tmp.write_text(json.dumps(result, default=str))
    os.replace(tmp, folder / f"rank_{rank}.json")


def main(argv: list[str] | None = None) -> int:
    spec_path, rank = argv if argv is not None else sys.argv[1:]
    spec_path, rank = Path(spec_path), int(rank)
    run = Run(json.loads(spec_path.read_text()), rank, spec_path.parent)
    try:
        run.execute()
    except BaseException as exc:  # noqa: BLE001 - every failure of the candidate is a result to record
        run.result["error"] = {"kind": error_kind(exc, run.phase), "phase": run.phase, "type": type(exc).__name__,
                               "message": str(exc)[:4000], "traceback": traceback.format_exc()[-8000:],
                               "peer_failure": is_peer_failure(exc), "time": time.time()}
        write_result(spec_path.parent, rank, run.result)
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    write_result(spec_path.parent, rank, run.result)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
