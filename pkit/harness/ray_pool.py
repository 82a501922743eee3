"""`pkit eval --ray ADDRESS|local`: the shards of a run as Ray tasks, their records written by this process.

Each shard (`shards.split`: the pairs `--shard K/N` would give) is one task asking for what its world size needs
(`task_resources`): on GPUs `num_gpus` = world size, so Ray gives each task GPUs of its own
(CUDA_VISIBLE_DEVICES) and two evaluations never share a GPU while timing; one CPU per rank either way (gloo on
the CPU). A task rebuilds its problems from their files (every node must see the same paths: a shared file
system, and pkit installed), evaluates its pairs (`runner.evaluations`) and sends each record and log line to
this process through a Ray queue. This process appends the records to --out as they come, under one tqdm bar
for the whole cluster; a record whose key (`records.KEY_FIELDS`) it already wrote (a task Ray ran again after
its node failed) is left out, so each key is written once.

Ray is an optional extra: `pip install 'pkit[ray]'`.

Example:
    >>> from pkit.harness.ray_pool import task_resources
    >>> task_resources(2, "cuda"), task_resources(4, "cpu")
    ({'num_cpus': 2, 'num_gpus': 2}, {'num_cpus': 4, 'num_gpus': 0})
"""
from __future__ import annotations

import json
import logging
import sys
from contextlib import closing
from pathlib import Path

from .contain import interruptible
from .problem import Problem
from .records import first_line, record_key, write_line
from .options import EvalOptions

POLL_S = 0.5
"""Seconds this process waits on the queue before it asks Ray which tasks have ended."""


def require_ray():
    """The `ray` module; ValueError naming --ray when it is not installed."""
    try:
        import ray
    except ImportError:
        raise ValueError("--ray: expected Ray to be installed, it is not: pip install 'pkit[ray]'") from None
    return ray


def connect(address: str) -> bool:
    """Join the Ray cluster at `address` ('local': start one on this machine), unless this process has joined
    one already; True when this call started or joined it (the caller then shuts it down)."""
    ray = require_ray()
    if ray.is_initialized():
        return False
    try:
        ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING)
    except Exception as e:  # noqa: BLE001 - Ray raises several kinds for an address it cannot reach
        raise ValueError(f"--ray: expected 'local', 'auto' or the address of a Ray cluster, got {address!r}: "
                         f"{type(e).__name__}: {first_line(str(e), 200)}") from None
    return True


def task_resources(world_size: int, device: str) -> dict:
    """The Ray resources of a task evaluating `world_size` ranks on `device` ('cpu' or 'cuda')."""
    return {"num_cpus": world_size, "num_gpus": world_size if device == "cuda" else 0}


def cluster_device(requested: str, world_size: int) -> str:
    """'cuda' or 'cpu' for the connected cluster, as `options.pick_device` decides for one machine: 'auto' is
    cuda when the cluster has `world_size` GPUs; ValueError naming --device for 'cuda' on a cluster without."""
    gpus = require_ray().cluster_resources().get("GPU", 0)
    if requested == "cuda" and gpus < world_size:
        raise ValueError(f"--device: 'cuda' needs {world_size} GPUs in the Ray cluster, it has {gpus:g}")
    if requested == "auto":
        return "cuda" if gpus >= world_size else "cpu"
    return requested


def slots(world_size: int, device: str) -> int:
    """How many tasks of `world_size` ranks the connected cluster runs at once (at least 1)."""
    resource = require_ray().cluster_resources().get("GPU" if device == "cuda" else "CPU", 0)
    return max(1, int(resource // world_size))


def portable(source: dict) -> dict:
    """A problem's `source` with its paths absolute, so that a task started in another folder finds them."""
    return {k: str(Path(v).resolve()) if k in ("path", "root") else v for k, v in source.items()}


def rebuild(source: dict) -> Problem:
    """The `Problem` a `source` dict describes, loaded from its files on this node."""
    from . import pkb
    from .problems import load_problem

    if source["kind"] == "pkit":
        return load_problem(Path(source["path"]))
    return next(p for p in pkb.discover(source["root"]) if p.name == source["stem"])


def run_shard(label: str, items: list, options: EvalOptions, parameters: dict, queue) -> int:
    """A task's body: evaluate shard `label`'s (problem source, candidate) `items`, putting ('log', label, line)
    and ('record', label, record) on `queue`; returns how many records it put."""
    from ..results import provenance
    from .runner import evaluations

    loaded: dict[str, Problem] = {}
    pairs = []
    for source, candidate in items:
        name = json.dumps(source, sort_keys=True)
        if name not in loaded:
            loaded[name] = rebuild(source)
        pairs.append((loaded[name], candidate))
    stamp = dict(provenance(parameters), shard=label)
    count = 0
    with closing(evaluations(pairs, options, provenance=stamp,
                             log=lambda line: queue.put(("log", label, line)))) as stream:
        for record in stream:
            queue.put(("record", label, record))
            count += 1
    return count


def run(shards: list[tuple[str, list]], options: EvalOptions, parameters: dict, out: Path,
        written: set) -> tuple[list[dict], list[str]]:
    """Run each (label, pairs) of `shards` as a Ray task on the connected cluster, appending records whose key is
    not in `written` to `out` (adding their keys); returns (the records written, one line per failed task).
    `options.device` must be 'cpu' or 'cuda'. SIGINT, SIGTERM and SIGHUP cancel the tasks (each kills its
    workers) and raise `contain.Interrupted`."""
    ray = require_ray()
    from ray.util.queue import Empty, Queue
    from tqdm import tqdm

    from .runner import progress_line

    queue = Queue()
    task, needs = ray.remote(run_shard), task_resources(options.world_size, options.device)
    running = {task.options(name=f"pkit eval shard {label}", **needs).remote(
        label, [(portable(p.source), c) for p, c in pairs], options, parameters, queue): label
        for label, pairs in shards if pairs}
    total = sum(len(pairs) for _, pairs in shards)
    records, failures = [], []
    try:
        with interruptible(), open(out, "a", encoding="utf-8") as handle, \
                tqdm(total=total, unit="candidate", desc=f"pkit eval: {len(running)} Ray tasks", file=sys.stderr,
                     dynamic_ncols=True) as bar:
            while running or not queue.empty():
                try:
                    kind, label, payload = queue.get(timeout=POLL_S)
                except Empty:
                    failures += _ended(ray, running)
                    continue
                if kind == "log":
                    bar.write(f"[shard {label}] {payload}", file=sys.stderr)
                elif record_key(payload) not in written:
                    written.add(record_key(payload))
                    write_line(handle, payload)
                    records.append(payload)
                    bar.update(1)
                    bar.write(progress_line(len(records), total, payload), file=sys.stderr)
    except BaseException:
        for ref in running:
            ray.cancel(ref)
        raise
    return records, failures


def _ended(ray, running: dict) -> list[str]:
    """Drop the tasks of `running` (ref → label) that have ended; one line for each that failed."""
    ready, _ = ray.wait(list(running), num_returns=len(running), timeout=0)
    failures = []
    for ref in ready:
        label = running.pop(ref)
        try:
            ray.get(ref)
        except Exception as e:  # noqa: BLE001 - a task's failure is reported, the other tasks go on
            cause = getattr(e, "cause", None) or e
            failures.append(f"shard {label}: {type(cause).__name__}: {first_line(str(cause), 300)}")
    return failures
