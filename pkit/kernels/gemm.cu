// C = A · Bᵀ on Hopper tensor cores with fp32 accumulation and a bf16 C: A is M × K, B is N × K (both
// K-contiguous, as nn.Linear keeps its weight), C is M × N, all row-major; the inputs bf16 (T = Bf16) or FP8 e4m3
// with per-tensor scales (T = E4m3, C = scale_a · scale_b · A · Bᵀ). A block computes 128 × BN tiles of C (BN 128
// or 256): a producer thread streams 128-byte-wide K slices of A and B into S shared-memory stages with TMA,
// and two consumer warpgroups each multiply their 64 rows with wgmma as the slices land. Full/empty mbarriers pass
// each stage between them. With `splits` > 1 a tile's K is cut into that many units, each run by some block: each
// leaves its fp32 partial in a slot of its own in a workspace, and the last to finish adds the others' into its
// own and writes the tile (split-K, for shapes with fewer tiles than SMs; or only the tiles of the last, partial
// wave, so that they fill the SMs: the split tail). Launch with 384 threads and
// Shape<BN, S, R>::kSmemBytes of shared memory.
// gemm_tn_pair runs the same in clusters of two blocks: the blocks of a pair take the two 128-row tiles above each
// other in one column of tiles, and each loads half of B's slice into both blocks' stages at once (TMA multicast),
// so a pair reads B from L2 once; each stage is released to its producer by the consumers of both blocks.
// gemm_tn_pair_a pairs the tiles beside each other in one row of tiles instead, each block loading 64 of A's 128
// rows into both: a pair reads A once (for wide K and few columns, where A is most of the bytes).
// gemm_tn_alternate gives each tile to one consumer, the two taking alternate tiles and their turns at the tensor
// cores: one writes a finished tile while the other multiplies (tiles 128 wide, no split-K), for short K where a
// tile's epilogue costs as much as its products; gemm_tn_alternate_pair_a runs it in pairs sharing A.
// Finished tiles leave through shared memory by TMA (TileTargets), one 64 × 64 box at a time: stored to C, or added
// into other tensors, a peer's included: the epilogue of GEMM + reduce-scatter and GEMM + all-reduce.
#include <cuda_bf16.h>
#include <pkit/cluster.cuh>
#include <pkit/sync.cuh>
#include <pkit/tma.cuh>
#include <pkit/wgmma.cuh>

using pkit::u32;
using pkit::u64;

constexpr int BM = 128, kSliceBytes = 128, kGroupM = 16, kMaxTargets = 8;  // BM: a tile's rows (but R = 64's)
constexpr int kABoxRows = 64;  // A is read in boxes of 64 rows: two per tile, or one per block of an A-sharing pair
constexpr int kSmemLimit = 232448;  // the most dynamic shared memory a Hopper block may have (227 KiB)
constexpr int kBox = 64, kBoxBytes = kBox * kBox * 2;  // the epilogue's 64 × 64 bf16 boxes (128-byte rows)
constexpr int kFixedBytes = 1024 + 256;  // alignment, mbarriers and flags

// The sizes that follow from the tile width BN, the stage count S and the tile's rows R (BM, or 64: alternate tiles
// of one accumulator each): a stage holds a 128-byte-wide K slice of A's R rows and B's BN rows; each consumer's
// outbox holds as many epilogue boxes as fit beside the stages, up to the BN / 64 of its 64 × BN rows (fewer: they
// are filled in turn). Registers per thread after the hand-over (65536
// per SM, 168 each at launch): the producer needs few, each consumer holds a 64 × BN fp32 accumulator.
template <int BN, int S, int R = BM>
struct Shape {
  static constexpr int kStages = S;
  static constexpr u32 kStageBytes = (R + BN) * kSliceBytes;
  static constexpr int kSpareBoxes = (kSmemLimit - kFixedBytes - S * int(kStageBytes)) / (2 * kBoxBytes);
  static constexpr int kBoxes = kSpareBoxes < BN / kBox ? kSpareBoxes : BN / kBox;  // per consumer
  static constexpr int kSmemBytes = S * kStageBytes + 2 * kBoxes * kBoxBytes + kFixedBytes;
  static constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;  // 128 · 40 + 256 · 232 = 384 · 168
  static_assert(kBoxes >= 1, "an outbox needs one box at least");
  static_assert((BN / kBox) % kBoxes == 0, "a tile's boxes fill the outbox whole times (put_tile's waits)");
};

// Where the rows of A come from: source q holds rows [q * rows_per_source, (q + 1) * rows_per_source) as its own
// row-major tensor, read in kABoxRows-row boxes of one K slice (pkit/ops/gemm.py a_sources). One source for a plain
// GEMM; one per rank for the fused all-gather, whose producers read peers' rows over NVLink as they multiply them.
struct ASources {
  pkit::TensorMap maps[kMaxTargets];
  int rows_per_source;  // a multiple of BM: no tile straddles two sources
  int count;
};

// Where finished tiles go: `count` bf16 tensors of N columns, written in 64 × 64 boxes (pkit/ops/gemm.py
// TILE_TARGETS), stored (add == 0: a plain GEMM's C) or added by TMA reduce. With rows_per_target > 0, row r of
// the product goes to target r / rows_per_target at row r % rows_per_target (reduce-scatter: a tile never
// straddles two); with 0, every row goes to every target (all-reduce).
struct TileTargets {
  pkit::TensorMap maps[kMaxTargets];
  int count;
  int rows_per_target;
  int add;
};

// Where rows of A become ready (overlap schedules): ready[r / rows_per_flag] reaches `epoch` once rows r.. are in
// place, written by a peer, the copy engine or a communication kernel (ready == nullptr: A is ready at launch).
// Row tiles are taken starting at `first_row_tile` (counted in 128-row tiles), so a rank starts with the rows it
// already holds.
struct RowsReady {
  const u32* ready;
  u32 epoch;
  int rows_per_flag;
  int first_row_tile;

  // Block until rows [row0, row_end) are ready; then the TMA (async proxy) may read them. Flags 0-63 once seen
  // ready (bits of `seen`, the caller's) are not read or fenced again: the earlier fence already orders them.
  __device__ void wait(int row0, int row_end, u64& seen) const {
    if (ready == nullptr) return;
    bool waited = false;
    for (int f = row0 / rows_per_flag; f <= (row_end - 1) / rows_per_flag; ++f) {
      if (f < 64 && (seen >> f & 1)) continue;
      pkit::wait_until(ready + f, epoch, PKIT_SITE);
      seen |= f < 64 ? u64(1) << f : 0;
      waited = true;
    }
    if (waited) asm volatile("fence.proxy.async.global;" ::: "memory");
  }
};

// How the work is cut (pkit/ops/gemm.py WORK): the first `whole_tiles` (cluster) tiles are a unit each, the others
// `splits` units each over contiguous shares of K (0 whole tiles: classic split-K; the whole waves of a
// split-tail plan, whose last partial wave of tiles is split to fill the SMs); for split tiles, `partials` holds a
// slot per unit and consumer for its fp32 partial (in accumulator order), and `arrivals` counts, per split tile and
// consumer, the units done with it (zero between calls: the last unit resets it).
// `scale_a` and `scale_b` point at one float each (FP8's per-tensor scales) or are null (a factor of 1).
struct Work {
  float* partials;
  u32* arrivals;
  const float* scale_a;
  const float* scale_b;
  int splits;
  int whole_tiles;

  __device__ float scale() const { return scale_a == nullptr ? 1.0f : *scale_a * *scale_b; }
};

// The (row, column) tile of C for tile number `t`: groups of kGroupM row tiles sweep the columns together, so the
// blocks running at once share their A and B slices in L2; row tiles are rotated to start at `first_row_tile`.
__device__ int2 tile_of(int t, int m_tiles, int n_tiles, int first_row_tile) {
  const int group = t / (kGroupM * n_tiles), first = group * kGroupM;
  const int height = min(kGroupM, m_tiles - first), in_group = t % (kGroupM * n_tiles);
  return make_int2((first + in_group % height + first_row_tile) % m_tiles, in_group / height);
}

// Unit u of the work: its tile number, its split of the tile's `splits` (1: a whole tile) and its K slices
// [k0, k1). Tiles before `whole` are one unit each, the others `splits` each (the units of a tile are neighbours,
// so they run at once and their partials meet in L2).
struct Unit {
  int tile, split, splits, k0, k1;
  __device__ Unit(int u, int k_tiles, int splits_, int whole)
      : tile(u < whole ? u : whole + (u - whole) / splits_), split(u < whole ? 0 : (u - whole) % splits_),
        splits(u < whole ? 1 : splits_), k0(split * k_tiles / splits), k1((split + 1) * k_tiles / splits) {}
};

// Barrier among the 128 threads of this consumer warpgroup (named barriers 1 and 2; 0 is __syncthreads).
__device__ __forceinline__ void warpgroup_sync() {
  if (threadIdx.x < 256) {
    asm volatile("bar.sync 1, 128;" ::: "memory");
  } else {
    asm volatile("bar.sync 2, 128;" ::: "memory");
  }
}

// Split-K: the units of split tile number `tile` (counted from the first split tile; split `split` is this one)
// meet in the workspace. A unit that finds the tile's other units all arrived is its
// last: it adds their slots into `d`, leaves the count zero for the next call and returns true (it writes the
// tile). Any other stores its partial into its own slot (kept in L2), then counts itself in; if that made it the
// last it goes on as the last does, else it returns false. No atomic adds, nothing to zero: a slot is read only
// in the call that wrote it. `last` is a word of this warpgroup's in shared memory.
template <int BN>
__device__ bool sum_partials(float (&d)[BN / 2], int half, int tile, int split, const Work& work, int* last) {
  constexpr int kPacks = BN / 8;  // float4s per thread
  const int t = threadIdx.x % 128;
  u32* const count = work.arrivals + tile * 2 + half;
  float4* const slots = reinterpret_cast<float4*>(work.partials) + (u64(tile) * 2 + half) * work.splits * kPacks * 128;
  warpgroup_sync();  // every thread has read `last` for this block's previous unit
  if (t == 0) *last = pkit::load_acquire_sys(count) == u32(work.splits - 1);
  warpgroup_sync();
  if (!*reinterpret_cast<volatile int*>(last)) {
    float4* const mine = slots + split * kPacks * 128;
#pragma unroll
    for (int i = 0; i < kPacks; ++i) __stcg(mine + i * 128 + t, make_float4(d[4 * i], d[4 * i + 1], d[4 * i + 2], d[4 * i + 3]));
    __threadfence();
    warpgroup_sync();
    if (t == 0) {
      *last = atomicAdd(count, 1u) == u32(work.splits - 1);
      __threadfence();
    }
    warpgroup_sync();
    if (!*reinterpret_cast<volatile int*>(last)) return false;
  }
  if (t == 0) *count = 0;
  for (int s = 0; s < work.splits; ++s) {
    if (s == split) continue;
    const float4* const slot = slots + s * kPacks * 128;
#pragma unroll
    for (int i = 0; i < kPacks; ++i) {
      const float4 v = __ldcg(slot + i * 128 + t);
      d[4 * i] += v.x, d[4 * i + 1] += v.y, d[4 * i + 2] += v.z, d[4 * i + 3] += v.w;
    }
  }
  return true;
}

// Rows row0.. (64) of this warpgroup's accumulator (layout: include/pkit/wgmma.cuh), times `scale`, rounded to
// bf16 and put into the targets one 64 × 64 box at a time through the consumer's `outbox` (Shape::kBoxes boxes,
// filled in turn): each thread writes its fragment of the box (128-byte swizzle: 16-byte chunk c of row r sits at
// c ^ (r % 8)), then one thread stores or adds it into every target the rows belong to, a bulk group per box. A box
// is filled again once the store that last read it is done reading, so with BN / 64 boxes nothing waits within a
// tile, and the stores go out while the next tile is multiplied.
template <int BN, int S, int R>
__device__ void put_tile(const float (&d)[BN / 2], float scale, unsigned char* outbox, const TileTargets& targets,
                         int row0, int col0) {
  constexpr int kBoxes = Shape<BN, S, R>::kBoxes;
  const int t = threadIdx.x % 128;
  const int row = 16 * (t / 32) + (t % 32) / 4;
#pragma unroll
  for (int j = 0; j < BN / kBox; ++j) {
    const u32 box = pkit::smem_addr(outbox + (j % kBoxes) * kBoxBytes);
    if (t == 0) pkit::bulk_wait_read<kBoxes - 1>();  // this box's last store has read it
    warpgroup_sync();
#pragma unroll
    for (int chunk = 0; chunk < kBox / 8; ++chunk) {  // accumulator column group 8j + chunk: columns 8 chunk.. of the box
      const int i = 8 * j + chunk;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = row + 8 * half;
        const __nv_bfloat162 pair = __floats2bfloat162_rn(scale * d[4 * i + 2 * half], scale * d[4 * i + 2 * half + 1]);
        pkit::store_shared(box + r * 128 + ((chunk ^ (r % 8)) * 16) + (t % 4) * 4, *reinterpret_cast<const u32*>(&pair));
      }
    }
    pkit::fence_async_shared();
    warpgroup_sync();
    if (t == 0) {
      const int first = targets.rows_per_target ? row0 / targets.rows_per_target : 0;
      const int last = targets.rows_per_target ? first : targets.count - 1;
      const int y = targets.rows_per_target ? row0 % targets.rows_per_target : row0;
      const void* const from = outbox + (j % kBoxes) * kBoxBytes;
      for (int q = first; q <= last; ++q) {
        if (targets.add) {
          pkit::tensor_add_2d(targets.maps[q], col0 + kBox * j, y, from);
        } else {
          pkit::tensor_store_2d(targets.maps[q], col0 + kBox * j, y, from);
        }
      }
      pkit::bulk_commit();
    }
  }
}

// The shared memory of a block: S stages (A's slice, then B's), an epilogue outbox per consumer, each stage's full
// (loaded) and empty (released by the consumers of every block of the cluster) mbarriers, and a split-K word per
// consumer, and (alternate tiles) each consumer's turn at the tensor cores.
template <int BN, int S, int R>
struct Pipeline {
  unsigned char* stages;
  unsigned char* outboxes;
  u64* full;
  u64* empty;
  int* last;
  u64* turn;

  __device__ unsigned char* a(int s) const { return stages + s * Shape<BN, S, R>::kStageBytes; }
  __device__ unsigned char* b(int s) const { return a(s) + R * kSliceBytes; }
  __device__ unsigned char* outbox(int half) const { return outboxes + half * Shape<BN, S, R>::kBoxes * kBoxBytes; }
};

// What a block does, shared by its producer and consumers: the work is cut into cluster tiles (m_tiles × n_tiles),
// each into `splits` units over K. A cluster tile is C tiles of R × BN: above each other in one column of tiles
// (blocks sharing B's slices) or, with kShareA, beside each other in one row (sharing A's). Cluster `cluster` of
// `clusters` takes units cluster, + clusters, ..., and its block `rank` the rank-th tile of each. A block whose tile
// lies past the last row or column (C does not divide them) loads its partner's slices, so that the cluster's loads
// stay in step, and writes nothing.
template <int BN, int C, class T, bool kShareA = false, int R = BM>
struct Grid {
  int m, n, m_tiles, n_tiles, k_tiles, units;

  __device__ Grid(int m_, int n_, int k, const Work& work)
      : m(m_), n(n_), m_tiles(kShareA ? row_tiles() : (row_tiles() + C - 1) / C),
        n_tiles(kShareA ? (col_tiles() + C - 1) / C : col_tiles()),
        k_tiles((k + T::kRowElements - 1) / T::kRowElements),
        units(work.whole_tiles + (m_tiles * n_tiles - work.whole_tiles) * work.splits) {}

  __device__ int row_tiles() const { return (m + R - 1) / R; }
  __device__ int col_tiles() const { return (n + BN - 1) / BN; }
  __device__ int cluster() const { return blockIdx.x / C; }
  __device__ int clusters() const { return gridDim.x / C; }
  __device__ int rank() const { return C == 1 ? 0 : int(pkit::cluster_rank()); }
  // The cluster tile row a call starting at 128-row tile `first` takes first.
  __device__ int first_tile_row(int first) const { return kShareA ? first * (BM / R) : first * (BM / R) / C; }
  // The row and column tile this block takes of cluster tile (x, y), whether it writes it, and the ones it loads.
  __device__ int row_tile(int x) const { return kShareA ? x : x * C + rank(); }
  __device__ int col_tile(int y) const { return kShareA ? y * C + rank() : y; }
  __device__ bool writes(int2 t) const { return row_tile(t.x) < row_tiles() && col_tile(t.y) < col_tiles(); }
  __device__ int loaded_row_tile(int x) const { return row_tile(x) < row_tiles() ? row_tile(x) : x * C; }
  __device__ int loaded_col_tile(int y) const { return col_tile(y) < col_tiles() ? col_tile(y) : y * C; }
};

// Release stage `s` to the producers of every block of the cluster (one thread of each consumer warpgroup).
template <int BN, int S, int C, int R>
__device__ void release(const Pipeline<BN, S, R>& p, int s) {
  if (C == 1) {
    pkit::mbarrier_arrive(&p.empty[s]);
  } else {
#pragma unroll
    for (int r = 0; r < C; ++r) pkit::mbarrier_arrive_in(&p.empty[s], r);
  }
}

// The producer thread: for each of this block's units, once its rows of A are ready, stream its K slices of A and
// B into the stages as the consumers of the cluster free them. Slice `it` (counted over all units) uses stage
// it % S. In a cluster each block loads its own rows of A and a C-th of B's rows into every block of the cluster.
template <int BN, int S, int C, class T, bool kShareA, int R>
__device__ void produce(const ASources& a, const pkit::TensorMap& b, const Grid<BN, C, T, kShareA, R>& g,
                        const RowsReady& rows, const Work& work, const Pipeline<BN, S, R>& p) {
  constexpr int kSharedRows = BN / C;  // rows of B's slice this block loads for a pair sharing B
  static_assert(!kShareA || C * kABoxRows == R, "a block of an A-sharing cluster loads one box of A's rows");
  static_assert(R % kABoxRows == 0, "a tile's rows are whole boxes of A");
  u32 it = 0;
  u64 seen = 0;  // flags of A's rows seen ready
  for (int u = g.cluster(); u < g.units; u += g.clusters()) {
    const Unit unit(u, g.k_tiles, work.splits, work.whole_tiles);
    const int2 tile = tile_of(unit.tile, g.m_tiles, g.n_tiles, g.first_tile_row(rows.first_row_tile));
    const int row0 = g.loaded_row_tile(tile.x) * R, col0 = g.loaded_col_tile(tile.y) * BN;
    rows.wait(row0, min(g.m, row0 + R), seen);
    const int source = row0 / a.rows_per_source, row = row0 - source * a.rows_per_source;
    for (int kt = unit.k0; kt < unit.k1; ++kt, ++it) {
      const int s = it % S, x = kt * T::kRowElements;
      if (it >= S) pkit::mbarrier_wait(&p.empty[s], (it / S - 1) & 1, PKIT_SITE);
      pkit::mbarrier_expect_bytes(&p.full[s], Shape<BN, S, R>::kStageBytes);
      if constexpr (kShareA) {
        const int half = g.rank() * kABoxRows;
        pkit::tensor_load_2d_multicast(p.a(s) + half * kSliceBytes, a.maps[source], x, row + half, &p.full[s],
                                       (1u << C) - 1);
      } else {
#pragma unroll
        for (int box = 0; box < R / kABoxRows; ++box)
          pkit::tensor_load_2d(p.a(s) + box * kABoxRows * kSliceBytes, a.maps[source], x, row + box * kABoxRows,
                               &p.full[s]);
      }
      if (C == 1 || kShareA) {
        pkit::tensor_load_2d(p.b(s), b, x, col0, &p.full[s]);
      } else {
        pkit::tensor_load_2d_multicast(p.b(s) + g.rank() * kSharedRows * kSliceBytes, b, x,
                                       col0 + g.rank() * kSharedRows, &p.full[s], (1u << C) - 1);
      }
    }
  }
}

// A consumer warpgroup (half 0 or 1): for each unit, multiply its 64 rows by the BN columns as the slices land,
// release each stage once its products are done, then (split-K: if it is the tile's last unit) put the 64 × BN
// result into the targets.
template <int BN, int S, int C, class T, bool kShareA, int R>
__device__ void consume(int half, const Grid<BN, C, T, kShareA, R>& g, const RowsReady& rows,
                        const TileTargets& targets, const Work& work, const Pipeline<BN, S, R>& p) {
  static_assert(R == BM, "consumers sharing a tile take 64 rows of its 128 each");
  const float scale = work.scale();
  u32 it = 0;
  for (int u = g.cluster(); u < g.units; u += g.clusters()) {
    const Unit unit(u, g.k_tiles, work.splits, work.whole_tiles);
    const int2 tile = tile_of(unit.tile, g.m_tiles, g.n_tiles, g.first_tile_row(rows.first_row_tile));
    float d[BN / 2];  // this consumer's 64 × BN fp32 accumulator
    if (unit.k0 == unit.k1) {
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;
    }
    for (int kt = unit.k0; kt < unit.k1; ++kt, ++it) {
      const int s = it % S;
      pkit::mbarrier_wait(&p.full[s], (it / S) & 1, PKIT_SITE);
      const u64 a_desc = pkit::smem_desc(p.a(s) + half * 64 * kSliceBytes), b_desc = pkit::smem_desc(p.b(s));
      pkit::wgmma_fence();
#pragma unroll
      for (int step = 0; step < kSliceBytes / 32; ++step)
        pkit::mma<BN, T>(d, a_desc + 2 * step, b_desc + 2 * step, kt > unit.k0 || step > 0);
      pkit::wgmma_commit();
      pkit::wgmma_wait<1>();  // the previous slice's products are done: release its stage
      if (kt > unit.k0 && threadIdx.x % 128 == 0) release<BN, S, C>(p, (it - 1) % S);
    }
    pkit::wgmma_wait<0>();
    if (unit.k1 > unit.k0 && threadIdx.x % 128 == 0) release<BN, S, C>(p, (it - 1) % S);
    if (!g.writes(tile)) continue;
    if (unit.splits > 1 &&
        !sum_partials<BN>(d, half, (unit.tile - work.whole_tiles) * C + g.rank(), unit.split, work, &p.last[half]))
      continue;
    put_tile<BN, S, R>(d, scale, p.outbox(half), targets, g.row_tile(tile.x) * R + half * 64,
                       g.col_tile(tile.y) * BN);
  }
  if (threadIdx.x % 128 == 0) pkit::bulk_wait<0>();  // the tiles are written before the block ends
}

// A consumer warpgroup (half 0 or 1) of a block whose consumers take alternate units (one K slice range, the whole
// tile, each): unit i of the block is half i % 2's. It multiplies all R rows (R / 64 accumulators of 64 × BN) once its
// turn comes, hands the turn to the other consumer as soon as its last products are issued, and writes the tile
// while the other multiplies. The stages of the other's units are skipped, counted all the same. In a pair the
// blocks' consumers of the same half take the pair's tiles of a unit together, and release its stages in both.
template <int BN, int S, int C, class T, bool kShareA, int R>
__device__ void consume_alternate(int half, const Grid<BN, C, T, kShareA, R>& g, const RowsReady& rows,
                                  const TileTargets& targets, const Work& work, const Pipeline<BN, S, R>& p) {
  constexpr int kParts = R / 64;  // accumulators of 64 rows
  const float scale = work.scale();
  u32 it = 0, turns = 0;
  for (int u = g.cluster(), i = 0; u < g.units; u += g.clusters(), ++i) {
    const Unit unit(u, g.k_tiles, 1, 0);
    if (i % 2 != half) {
      it += unit.k1 - unit.k0;
      continue;
    }
    const int2 tile = tile_of(unit.tile, g.m_tiles, g.n_tiles, g.first_tile_row(rows.first_row_tile));
    float d[kParts][BN / 2];  // rows 0-63 (and 64-127) of the tile
    if (unit.k0 == unit.k1) {
#pragma unroll
      for (int r = 0; r < kParts; ++r)
#pragma unroll
        for (int j = 0; j < BN / 2; ++j) d[r][j] = 0.0f;
    }
    pkit::mbarrier_wait(&p.turn[half], turns++ & 1, PKIT_SITE);
    for (int kt = unit.k0; kt < unit.k1; ++kt, ++it) {
      const int s = it % S;
      pkit::mbarrier_wait(&p.full[s], (it / S) & 1, PKIT_SITE);
      const u64 b_desc = pkit::smem_desc(p.b(s));
      pkit::wgmma_fence();
#pragma unroll
      for (int step = 0; step < kSliceBytes / 32; ++step) {
#pragma unroll
        for (int r = 0; r < kParts; ++r)
          pkit::mma<BN, T>(d[r], pkit::smem_desc(p.a(s) + r * 64 * kSliceBytes) + 2 * step, b_desc + 2 * step,
                           kt > unit.k0 || step > 0);
      }
      pkit::wgmma_commit();
      pkit::wgmma_wait<1>();
      if (kt > unit.k0 && threadIdx.x % 128 == 0) release<BN, S, C>(p, (it - 1) % S);
    }
    if (threadIdx.x % 128 == 0) pkit::mbarrier_arrive(&p.turn[1 - half]);
    pkit::wgmma_wait<0>();
    if (unit.k1 > unit.k0 && threadIdx.x % 128 == 0) release<BN, S, C>(p, (it - 1) % S);
    if (!g.writes(tile)) continue;
#pragma unroll
    for (int r = 0; r < kParts; ++r)
      put_tile<BN, S, R>(d[r], scale, p.outbox(half), targets, g.row_tile(tile.x) * R + r * 64,
                         g.col_tile(tile.y) * BN);
  }
  if (threadIdx.x % 128 == 0) pkit::bulk_wait<0>();
}

// The body of gemm_tn (C = 1), gemm_tn_pair (C = 2), gemm_tn_pair_a (C = 2, kShareA), gemm_tn_alternate (C = 1,
// A: alternate tiles) and gemm_tn_alternate_pair_a (C = 2, A, kShareA): set up the
// stages, hand registers to the consumers, run the producer and the consumers; in a cluster, no block starts
// before every block's mbarriers are set, nor ends while another may still arrive on them.
template <int BN, int S, int C, class T, bool A = false, bool kShareA = false, int R = BM>
__device__ __forceinline__ void gemm_block(const ASources& a, const pkit::TensorMap& b, int m, int n, int k,
                                           const RowsReady& rows, const TileTargets& targets, const Work& work) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  using Sh = Shape<BN, S, R>;
  Pipeline<BN, S, R> p;
  p.stages = reinterpret_cast<unsigned char*>((reinterpret_cast<u64>(smem_raw) + 1023) & ~u64(1023));
  p.outboxes = p.stages + S * Sh::kStageBytes;
  p.full = reinterpret_cast<u64*>(p.outboxes + 2 * Sh::kBoxes * kBoxBytes);
  p.empty = p.full + S;
  p.last = reinterpret_cast<int*>(p.empty + S);
  p.turn = p.empty + S + 1;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      pkit::mbarrier_init(&p.full[s], 1);
      pkit::mbarrier_init(&p.empty[s], A ? C : 2 * C);  // one arrival per consumer warpgroup using the stage
    }
    if (A) {
      pkit::mbarrier_init(&p.turn[0], 1);
      pkit::mbarrier_init(&p.turn[1], 1);
      pkit::mbarrier_arrive(&p.turn[0]);  // consumer 0 multiplies first
    }
  }
  if (C == 1) {
    __syncthreads();
  } else {
    pkit::cluster_sync();
  }
  const Grid<BN, C, T, kShareA, R> g(m, n, k, work);
  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    pkit::registers_lower_to<Sh::kProducerRegisters>();
    if (threadIdx.x == 0) produce<BN, S, C, T, kShareA, R>(a, b, g, rows, work, p);
  } else {
    pkit::registers_raise_to<Sh::kConsumerRegisters>();
    if constexpr (A) {
      consume_alternate<BN, S, C, T, kShareA, R>(warpgroup - 1, g, rows, targets, work, p);
    } else {
      consume<BN, S, C, T, kShareA, R>(warpgroup - 1, g, rows, targets, work, p);
    }
  }
  if (C > 1) pkit::cluster_sync();
}

template <int BN, int S, class T>
__global__ void __launch_bounds__(384, 1) gemm_tn(const __grid_constant__ ASources a,
                                                  const __grid_constant__ pkit::TensorMap b, int m, int n, int k,
                                                  const RowsReady rows, const __grid_constant__ TileTargets targets,
                                                  const Work work) {
  gemm_block<BN, S, 1, T>(a, b, m, n, k, rows, targets, work);
}

template <int BN, int S, class T>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)
    gemm_tn_pair(const __grid_constant__ ASources a, const __grid_constant__ pkit::TensorMap b, int m, int n, int k,
                 const RowsReady rows, const __grid_constant__ TileTargets targets, const Work work) {
  gemm_block<BN, S, 2, T>(a, b, m, n, k, rows, targets, work);
}

template <int BN, int S, class T>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)
    gemm_tn_pair_a(const __grid_constant__ ASources a, const __grid_constant__ pkit::TensorMap b, int m, int n, int k,
                   const RowsReady rows, const __grid_constant__ TileTargets targets, const Work work) {
  gemm_block<BN, S, 2, T, false, true>(a, b, m, n, k, rows, targets, work);
}

template <int BN, int S, class T>
__global__ void __launch_bounds__(384, 1) gemm_tn_alternate(const __grid_constant__ ASources a,
                                                            const __grid_constant__ pkit::TensorMap b, int m, int n,
                                                            int k, const RowsReady rows,
                                                            const __grid_constant__ TileTargets targets,
                                                            const Work work) {
  gemm_block<BN, S, 1, T, true>(a, b, m, n, k, rows, targets, work);
}

template <int BN, int S, class T>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)
    gemm_tn_alternate_pair_a(const __grid_constant__ ASources a, const __grid_constant__ pkit::TensorMap b, int m,
                             int n, int k, const RowsReady rows, const __grid_constant__ TileTargets targets,
                             const Work work) {
  gemm_block<BN, S, 2, T, true, true>(a, b, m, n, k, rows, targets, work);
}

// Alternate tiles of 64 rows, one accumulator each: blocks alone, or in pairs sharing B (_pair).
template <int BN, int S, class T>
__global__ void __launch_bounds__(384, 1) gemm_tn_alternate_short(const __grid_constant__ ASources a,
                                                                  const __grid_constant__ pkit::TensorMap b, int m,
                                                                  int n, int k, const RowsReady rows,
                                                                  const __grid_constant__ TileTargets targets,
                                                                  const Work work) {
  gemm_block<BN, S, 1, T, true, false, 64>(a, b, m, n, k, rows, targets, work);
}

template <int BN, int S, class T>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)
    gemm_tn_alternate_short_pair(const __grid_constant__ ASources a, const __grid_constant__ pkit::TensorMap b, int m,
                                 int n, int k, const RowsReady rows, const __grid_constant__ TileTargets targets,
                                 const Work work) {
  gemm_block<BN, S, 2, T, true, false, 64>(a, b, m, n, k, rows, targets, work);
}
