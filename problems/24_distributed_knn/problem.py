"""Exact k-nearest-neighbour search over a database sharded across ranks.

Rank r holds rows [r * n/W, (r + 1) * n/W) of the database (n/W, dim), the queries (q, dim) (the same
on every rank) and k. Coordinates are small integers stored as float32 (quantised embeddings), so
squared L2 distances are exact integers in float32 whichever way they are computed; ties are broken by
the smaller global id. Output, replicated on every rank: (squared distances (q, k) float32, global ids
(q, k) int64), each row ordered by (distance, id) ascending.
"""
import torch
import torch.distributed as dist

from pkit.problem_kit import cost as _cost, generator

META = {
    "name": "distributed_knn",
    "category": "applications",
    "models": "sharded exact vector search (FAISS IndexShards / brute-force GPU kNN), merge of per-shard top-k",
    "dtypes": ["float32"],
    "dtype_reason": ("float32: integer coordinates give exact squared distances (up to 2^15 here) in fp32, not in "
                     "bf16"),
    "world_sizes": [2, 4, 8],
    "traffic": "aggregated",
    "description": "Rank holds a database shard (n/W, dim) of integer-valued float32 vectors, the queries "
                   "(q, dim) and k; return each query's k nearest rows: (squared L2 distances, global ids), "
                   "ordered by (distance, id), the same on every rank.",
}

SIZES = {
    "tiny": {"n": 256, "dim": 8, "queries": 4, "k": 5},
    "large": {"n": 2**20, "dim": 128, "queries": 2048, "k": 100},
}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    s = SIZES[size]
    db = torch.randint(-8, 8, (s["n"] // world_size, s["dim"]), generator=generator(seed, rank))
    queries = torch.randint(-8, 8, (s["queries"], s["dim"]), generator=generator(seed, -1))  # shared stream
    return db.float().to(device), queries.float().to(device), s["k"]


def reference(db, queries, k):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    total = db.shape[0] * world_size
    dist2 = queries.square().sum(1, keepdim=True) - 2 * queries @ db.T + db.square().sum(1)
    ids = torch.arange(db.shape[0], device=db.device) + rank * db.shape[0]
    # One int64 key per candidate orders by (distance, id): distance * total + id.
    local = (dist2.long() * total + ids).topk(k, dim=1, largest=False).values
    gathered = [torch.empty_like(local) for _ in range(world_size)]
    dist.all_gather(gathered, local)
    best = torch.cat(gathered, dim=1).topk(k, dim=1, largest=False).values
    return (best // total).float(), best % total


def cost(world_size, size, dtype="float32"):
    # FLOPs: the distance GEMM, 2 * q * n/W * dim (the norm terms are lower order). HBM: read the shard
    # and the queries, write the outputs. Links: each rank's q*k local candidates (4-byte distance,
    # 8-byte id) go to the W-1 other ranks.
    # Sync steps: 1, one all-gather round of the local candidates.
    s = SIZES[size]
    local = s["n"] // world_size
    return _cost(flops=2 * s["queries"] * local * s["dim"],
                 hbm_bytes=4 * (local + s["queries"]) * s["dim"] + 12 * s["queries"] * s["k"],
                 link_bytes=12 * s["queries"] * s["k"] * (world_size - 1), sync_steps=1)
