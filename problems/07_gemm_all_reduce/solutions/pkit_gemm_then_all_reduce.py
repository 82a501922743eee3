"""One GEMM of the local partial product, then one pkit all-reduce of it (not overlapped).

pkit.dist.all_reduce picks the cheapest form (see 01's pkit_all_reduce.py): LL packets up to 1 MiB, the one-shot
staged kernel at W = 2 (N bytes read per GPU, the ring's 2(W-1)/W·N), the two-shot staged kernel past that at
W > 2. Sums are fp32 in rank order, rounded once, so every rank holds identical bits. GEMM and communication run
in sequence on the current stream: at the large size the GEMM (~1.3 ms) dwarfs the 64 MiB all-reduce, so
overlap could save at most about an eighth.
"""
from pkit import dist as pdist


def solution(x, weight):
    return pdist.all_reduce(x @ weight.t())
