"""pkit's words for what moves bytes, and for where they go: one source every layer reads.

A **family** is the engine that moves the bytes: `ce` (the copy engine, cudaMemcpy*), `sm` (SM loads and stores
of 16-byte registers, pkit's copy kernels), `tma` (the Tensor Memory Accelerator's bulk copies) and `ll` (LL
packets: SM stores whose every 8-byte word carries a flag, for small collectives). A **mechanism** is a family,
or between GPUs a family and a direction, `sm_push` (the source's SMs store into the peer) or `tma_pull` (the
destination's TMA reads the peer): transfers (`pkit.ops.transfers`), collectives (`pkit.ops.collective_ops`), the
bandwidth matrix's engines (`pkit.experiments.hierarchy.matrix`), the overlap schedules' transfers
(`pkit.ops.overlap_patterns`) and the benchmark analysis of candidates' code (`pkit.analysis`) all use these words,
and figures show each family's `label`. A **route kind** is where a copy goes: `peer` (GPU to GPU), `local`
(within one GPU), `h2d` and `d2h` (pinned host memory to and from a GPU).

Example:
    >>> mechanism("sm", "pull"), family("tma_push"), FAMILIES["ce"].label
    ('sm_pull', 'tma', 'copy engine')
    >>> families("ce", "sm")
    ('ce', 'sm')
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """One engine that moves bytes: its `name`, the words figures show (`label`) and what it is (`description`)."""

    name: str
    label: str
    description: str


FAMILIES = {f.name: f for f in (
    Family("ce", "copy engine", "the GPU's copy engines (cudaMemcpyAsync, cudaMemcpyPeerAsync): no SM time"),
    Family("sm", "SM (register-level)", "SM loads and stores through (peer) pointers, 16 bytes a thread"),
    Family("tma", "TMA", "the Tensor Memory Accelerator's bulk copies (cp.async.bulk), issued by one thread"),
    Family("ll", "LL packets", "SM stores whose every 8-byte word carries a flag the reader polls (small messages)"),
)}
"""Every family, in the order figures list them."""

DIRECTIONS = ("push", "pull")
"""Between GPUs an SM or TMA copy runs on the source (push) or on the destination (pull)."""

ROUTE_KINDS = ("peer", "local", "h2d", "d2h")
"""Where a copy goes: GPU to GPU, within one GPU, pinned host memory to a GPU, a GPU to pinned host memory."""


def families(*names: str) -> tuple[str, ...]:
    """`names`, each checked to be a family (ValueError naming the others)."""
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise ValueError(f"families: expected names from {list(FAMILIES)}, got {unknown}")
    return names


def mechanism(family_name: str, direction: str | None = None) -> str:
    """The mechanism of `family_name` moving bytes in `direction` ('push', 'pull', or None: within a GPU or to and
    from the host)."""
    families(family_name)
    if direction is None:
        return family_name
    if direction not in DIRECTIONS:
        raise ValueError(f"direction: expected one of {DIRECTIONS} or None, got {direction!r}")
    return f"{family_name}_{direction}"


def family(mechanism_name: str) -> str:
    """The family of a mechanism ('sm_pull' → 'sm')."""
    return mechanism_name.split("_")[0]
