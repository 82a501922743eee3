"""Every collective (each mechanism, both all-reduce algorithms) and every peer-copy mechanism, once each at a
small size on every GPU of the machine (or, on a machine with one, on ranks sharing it), checked against NumPy: the
workload that scripts/sanitize.sh runs under compute-sanitizer.

Usage: python3 scripts/sanitize_kernels.py [--shared-ranks N]   (exit 0 when every result is right; prints one line
per case; --shared-ranks: how many ranks share GPU 0 on a one-GPU machine, 2 to 8, default 2)
"""
from __future__ import annotations

import argparse
import sys

import cupy as cp
import numpy as np

from pkit.ops.collectives import COLLECTIVES, Collectives, collective
from pkit.ops.transfers import MECHANISMS as COPY_MECHANISMS
from pkit.ops.transfers import peer_copy
from pkit.team import default_team
from pkit.tolerance import tolerance

SHARE = 1 << 13  # float32 per rank's share (32 KiB): collectives of up to 8 ranks stay within every mechanism's limits


def collective_cases():
    """(op, keyword arguments of Collectives.run) for every registered op and mechanism, and every algorithm each
    mechanism runs (pkit.ops.collectives.COLLECTIVES)."""
    return [(op.name, form) for op in COLLECTIVES.values() for form in op.forms()]


def run_collective(team, coll, op: str, kwargs: dict) -> bool:
    """One call of `op` on fresh random float32 inputs, NaN-poisoned outputs; True when every rank is right (a rooted
    op at its default root 0; an output the op leaves alone still all NaN)."""
    rng = np.random.default_rng(0)
    entry = collective(op)
    in_n, out_n = entry.counts(SHARE * team.size, team.size)
    inp, out = team.empty((in_n,), "float32"), team.empty((out_n,), "float32")
    host = [rng.standard_normal(in_n, dtype=np.float32) for _ in range(team.size)]
    for r in range(team.size):
        with cp.cuda.Device(team.devices[r]):
            inp[r][:] = cp.asarray(host[r])
            out[r].fill(np.nan)
    team.synchronize()
    coll.run(op, out, inp, **kwargs)
    team.synchronize()
    atol, rtol = tolerance("float32")
    wants = [entry.reference(host, r) for r in range(team.size)]
    return all(np.isnan(cp.asnumpy(out[r])).all() if want is None
               else np.allclose(cp.asnumpy(out[r]), want, rtol=rtol, atol=atol) for r, want in enumerate(wants))


def run_copy(team, mechanism: str) -> bool:
    """One copy from GPU 0 to GPU 1 by `mechanism` into a NaN-poisoned buffer; True when it arrived whole."""
    src, dst = team.empty((SHARE,), "float32"), team.empty((SHARE,), "float32")
    with cp.cuda.Device(team.devices[0]):
        src[0][:] = cp.arange(SHARE, dtype=cp.float32)
    with cp.cuda.Device(team.devices[1]):
        dst[1].fill(np.nan)
    team.synchronize()
    peer_copy(dst[1], src[0], mechanism)
    team.synchronize()
    return bool(np.array_equal(cp.asnumpy(dst[1]), np.arange(SHARE, dtype=np.float32)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared-ranks", type=int, choices=range(2, 9), default=2, metavar="N",
                        help="ranks sharing GPU 0 on a one-GPU machine (2 to 8)")
    args = parser.parse_args(argv)
    team = default_team(args.shared_ranks)  # ranks sharing a GPU launch grids that all fit on it at once
    coll = Collectives(team)
    results = [(f"{op} {kwargs}", run_collective(team, coll, op, kwargs)) for op, kwargs in collective_cases()]
    results += [(f"peer_copy {m}", run_copy(team, m)) for m in COPY_MECHANISMS]
    for name, ok in results:
        print(("ok   " if ok else "WRONG"), name)
    return 0 if all(ok for _, ok in results) else 1


if __name__ == "__main__":
    sys.exit(main())
