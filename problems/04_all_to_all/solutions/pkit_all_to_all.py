"""pkit all-to-all: one pkit.dist.all_to_all call on the (tokens, hidden) blocks.

Bytes are fixed by the problem, (W-1)/W of x per GPU in one round, as NCCL's all_to_all_single. pkit.dist
moves shares up to 512 KiB per peer as LL packets (no barrier, a few µs against ~10 µs for a small NCCL call)
and larger ones with the staged kernel: one copy into symmetric staging, one barrier, each rank pulls its W-1
blocks from the peers' staging with 16-byte loads (every write local, no NCCL proxy or channel setup).
"""
from pkit import dist as pdist


def solution(x):
    return pdist.all_to_all(x)
