// C = A · Bᵀ on Hopper tensor cores with fp32 accumulation and a bf16 C: A is M × K, B is N × K (both
// K-contiguous, as nn.Linear keeps its weight), C is M × N, all row-major; the inputs bf16 (T = Bf16) or FP8 e4m3
// with per-tensor scales (T = E4m3, C = scale_a · scale_b · A · Bᵀ). A block computes 128 × BN tiles of C (BN 128
// or 256): a producer thread streams 128-byte-wide K slices of A and B into kStages shared-memory stages with TMA,
// and two consumer warpgroups each multiply their 64 rows with wgmma as the slices land. Full/empty mbarriers pass
// each stage between them. With `splits` > 1 a tile's K is cut into that many units, each run by some block: each
// adds its fp32 partial into the tile's sum in a workspace, and the last to finish writes the tile (split-K,
// for shapes with fewer tiles than SMs). Launch with 384 threads and Shape<BN>::kSmemBytes of shared memory.
// Finished tiles leave through shared memory by TMA (TileTargets): stored to C, or added into other tensors, a
// peer's included: the epilogue of GEMM + reduce-scatter and GEMM + all-reduce.
#include <cuda_bf16.h>
#include <pkit/reduce.cuh>
#include <pkit/sync.cuh>
#include <pkit/tma.cuh>
#include <pkit/wgmma.cuh>

using pkit::u32;
using pkit::u64;

constexpr int BM = 128, kSliceBytes = 128, kGroupM = 16, kMaxTargets = 8;
constexpr int kSmemLimit = 232448;  // the most dynamic shared memory a Hopper block may have (227 KiB)

// A consumer's staging for the TMA epilogue: 64 rows × 128 columns, as two 64 × 64 boxes with 128-byte rows.
struct Outbox {
  __nv_bfloat16 box[2][64 * 64];
};

// The sizes that follow from the tile width BN: a stage holds a 128-byte-wide K slice of A's 128 rows and B's BN
// rows; as many stages as fit beside the outboxes and mbarriers. Registers per thread after the hand-over (65536
// per SM, 168 each at launch): the producer needs few, each consumer holds a 64 × BN fp32 accumulator.
template <int BN>
struct Shape {
  static constexpr u32 kStageBytes = (BM + BN) * kSliceBytes;
  static constexpr int kExtraBytes = 2 * sizeof(Outbox) + 1024 + 256;  // outboxes, alignment, mbarriers and flags
  static constexpr int kStages = (kSmemLimit - kExtraBytes) / kStageBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes + kExtraBytes;
  static constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;  // 128 · 40 + 256 · 232 = 384 · 168
};
static_assert(Shape<256>::kStages == 4 && Shape<128>::kStages == 6, "pkit/ops/gemm.py STAGES mirrors these");

// Where the rows of A come from: source q holds rows [q * rows_per_source, (q + 1) * rows_per_source) as its own
// row-major tensor, read in 128-row boxes of one K slice (pkit/ops/gemm.py a_sources). One source for a plain
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
// Row tiles are taken starting at `first_row_tile`, so a rank starts with the rows it already holds.
struct RowsReady {
  const u32* ready;
  u32 epoch;
  int rows_per_flag;
  int first_row_tile;

  // Block until rows [row0, row_end) are ready; then the TMA (async proxy) may read them.
  __device__ void wait(int row0, int row_end) const {
    if (ready == nullptr) return;
    for (int f = row0 / rows_per_flag; f <= (row_end - 1) / rows_per_flag; ++f) pkit::wait_until(ready + f, epoch, PKIT_SITE);
    asm volatile("fence.proxy.async.global;" ::: "memory");
  }
};

// How the work is cut (pkit/ops/gemm.py WORK): `splits` units per tile, each over a contiguous share of K; with
// more than one, `partials` holds each tile's fp32 sum of its units' partials (per consumer, in accumulator order)
// and `arrivals` counts, per tile and consumer, the units done with it (both zero between calls: the last unit
// resets them).
// `scale_a` and `scale_b` point at one float each (FP8's per-tensor scales) or are null (a factor of 1).
struct Work {
  float* partials;
  u32* arrivals;
  const float* scale_a;
  const float* scale_b;
  int splits;

  __device__ float scale() const { return scale_a == nullptr ? 1.0f : *scale_a * *scale_b; }
};

// The (row, column) tile of C for tile number `t`: groups of kGroupM row tiles sweep the columns together, so the
// blocks running at once share their A and B slices in L2; row tiles are rotated to start at first_row_tile.
__device__ int2 tile_of(int t, int m_tiles, int n_tiles, const RowsReady& rows) {
  const int group = t / (kGroupM * n_tiles), first = group * kGroupM;
  const int height = min(kGroupM, m_tiles - first), in_group = t % (kGroupM * n_tiles);
  return make_int2((first + in_group % height + rows.first_row_tile) % m_tiles, in_group / height);
}

// Unit u of the work: its tile number and its K slices [k0, k1) (the units of a tile are neighbours, so they run
// at once and their partials meet in L2).
struct Unit {
  int tile, split, k0, k1;
  __device__ Unit(int u, int k_tiles, int splits)
      : tile(u / splits), split(u % splits), k0(split * k_tiles / splits), k1((split + 1) * k_tiles / splits) {}
};

// Barrier among the 128 threads of this consumer warpgroup (named barriers 1 and 2; 0 is __syncthreads).
__device__ __forceinline__ void warpgroup_sync() {
  if (threadIdx.x < 256) {
    asm volatile("bar.sync 1, 128;" ::: "memory");
  } else {
    asm volatile("bar.sync 2, 128;" ::: "memory");
  }
}

// Split-K: add this consumer's partial of unit `unit` into its tile's fp32 sum in the workspace (vector atomics,
// done in L2); the last of the tile's units to arrive takes the whole sum into `d`, leaves the sum zero for the
// next call and returns true (it writes the tile), the others false. `last` is a word of this warpgroup's in shared
// memory.
template <int BN>
__device__ bool sum_partials(float (&d)[BN / 2], int half, const Unit& unit, const Work& work, int* last) {
  constexpr int kPacks = BN / 8;  // float4s per thread
  const int t = threadIdx.x % 128;
  float4* const sum = reinterpret_cast<float4*>(work.partials) + (u64(unit.tile) * 2 + half) * kPacks * 128;
#pragma unroll
  for (int i = 0; i < kPacks; ++i) pkit::add_global(sum + i * 128 + t, make_float4(d[4 * i], d[4 * i + 1], d[4 * i + 2], d[4 * i + 3]));
  __threadfence();
  warpgroup_sync();
  if (t == 0) {
    u32* const count = work.arrivals + unit.tile * 2 + half;
    *last = atomicAdd(count, 1u) == u32(work.splits - 1);
    if (*last) *count = 0;
  }
  warpgroup_sync();
  if (!*reinterpret_cast<volatile int*>(last)) return false;
  __threadfence();
#pragma unroll
  for (int i = 0; i < kPacks; ++i) {
    const float4 v = __ldcg(sum + i * 128 + t);
    d[4 * i] = v.x, d[4 * i + 1] = v.y, d[4 * i + 2] = v.z, d[4 * i + 3] = v.w;
    __stcg(sum + i * 128 + t, make_float4(0.0f, 0.0f, 0.0f, 0.0f));
  }
  return true;
}

// Rows row0.. (64) of this warpgroup's accumulator (layout: include/pkit/wgmma.cuh), times `scale`, rounded to
// bf16 and put into the targets through `out`, 128 columns at a time: each thread writes its fragment into the
// boxes (128-byte swizzle: 16-byte chunk c of row r sits at c ^ (r % 8)), then one thread stores or adds both
// boxes into every target the rows belong to. The last half's boxes are read out while the next tile is multiplied.
template <int BN>
__device__ void put_tile(const float (&d)[BN / 2], float scale, Outbox& out, const TileTargets& targets, int row0,
                         int col0) {
  const int t = threadIdx.x % 128;
  const int row = 16 * (t / 32) + (t % 32) / 4;
#pragma unroll
  for (int h = 0; h < BN / 128; ++h) {
    if (t == 0) pkit::bulk_wait_read<0>();  // the boxes are free again (the last half's, or last tile's, reads)
    warpgroup_sync();
#pragma unroll
    for (int i = 16 * h; i < 16 * h + 16; ++i) {
      const int col = 8 * (i - 16 * h) + 2 * (t % 4), box = col / 64, chunk = (col % 64) / 8;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = row + 8 * half;
        const __nv_bfloat162 pair = __floats2bfloat162_rn(scale * d[4 * i + 2 * half], scale * d[4 * i + 2 * half + 1]);
        pkit::store_shared(pkit::smem_addr(out.box[box]) + r * 128 + ((chunk ^ (r % 8)) * 16) + (col % 8) * 2,
                           *reinterpret_cast<const u32*>(&pair));
      }
    }
    pkit::fence_async_shared();
    warpgroup_sync();
    if (t == 0) {
      const int first = targets.rows_per_target ? row0 / targets.rows_per_target : 0;
      const int last = targets.rows_per_target ? first : targets.count - 1;
      const int y = targets.rows_per_target ? row0 % targets.rows_per_target : row0;
      for (int q = first; q <= last; ++q)
        for (int box = 0; box < 2; ++box) {
          const int x = col0 + 128 * h + 64 * box;
          if (targets.add) {
            pkit::tensor_add_2d(targets.maps[q], x, y, out.box[box]);
          } else {
            pkit::tensor_store_2d(targets.maps[q], x, y, out.box[box]);
          }
        }
      pkit::bulk_commit();
    }
  }
}

// The shared memory of a block: kStages stages (A's slice, then B's), an epilogue outbox per consumer, each
// stage's full (loaded) and empty (released by both consumers) mbarriers, and a split-K word per consumer.
template <int BN>
struct Pipeline {
  unsigned char* stages;
  Outbox* outboxes;
  u64* full;
  u64* empty;
  int* last;

  __device__ unsigned char* a(int s) const { return stages + s * Shape<BN>::kStageBytes; }
  __device__ unsigned char* b(int s) const { return a(s) + BM * kSliceBytes; }
};

// What a block does, shared by its producer and consumers: the tiles and the units it takes.
struct Grid {
  int m, n, k, m_tiles, n_tiles, k_tiles, units;
};

// The producer thread: for each of this block's units (u = blockIdx.x, + gridDim.x, ...), once its rows of A are
// ready, stream its K slices of A and B into the stages as the consumers free them. Slice `it` (counted over all
// units) uses stage it % kStages.
template <int BN, class T>
__device__ void produce(const ASources& a, const pkit::TensorMap& b, const Grid& g, const RowsReady& rows,
                        const Work& work, const Pipeline<BN>& p) {
  constexpr int kStages = Shape<BN>::kStages;
  u32 it = 0;
  for (int u = blockIdx.x; u < g.units; u += gridDim.x) {
    const Unit unit(u, g.k_tiles, work.splits);
    const int2 tile = tile_of(unit.tile, g.m_tiles, g.n_tiles, rows);
    rows.wait(tile.x * BM, min(g.m, (tile.x + 1) * BM));
    const int source = tile.x * BM / a.rows_per_source, row = tile.x * BM - source * a.rows_per_source;
    for (int kt = unit.k0; kt < unit.k1; ++kt, ++it) {
      const int s = it % kStages;
      if (it >= kStages) pkit::mbarrier_wait(&p.empty[s], (it / kStages - 1) & 1, PKIT_SITE);
      pkit::mbarrier_expect_bytes(&p.full[s], Shape<BN>::kStageBytes);
      pkit::tensor_load_2d(p.a(s), a.maps[source], kt * T::kRowElements, row, &p.full[s]);
      pkit::tensor_load_2d(p.b(s), b, kt * T::kRowElements, tile.y * BN, &p.full[s]);
    }
  }
}

// A consumer warpgroup (half 0 or 1): for each unit, multiply its 64 rows by the BN columns as the slices land,
// release each stage once its products are done, then (split-K: if it is the tile's last unit) put the 64 × BN
// result into the targets.
template <int BN, class T>
__device__ void consume(int half, const Grid& g, const RowsReady& rows, const TileTargets& targets, const Work& work,
                        const Pipeline<BN>& p) {
  constexpr int kStages = Shape<BN>::kStages;
  const float scale = work.scale();
  u32 it = 0;
  for (int u = blockIdx.x; u < g.units; u += gridDim.x) {
    const Unit unit(u, g.k_tiles, work.splits);
    const int2 tile = tile_of(unit.tile, g.m_tiles, g.n_tiles, rows);
    float d[BN / 2];  // this consumer's 64 × BN fp32 accumulator
    if (unit.k0 == unit.k1) {
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;
    }
    for (int kt = unit.k0; kt < unit.k1; ++kt, ++it) {
      const int s = it % kStages;
      pkit::mbarrier_wait(&p.full[s], (it / kStages) & 1, PKIT_SITE);
      const u64 a_desc = pkit::smem_desc(p.a(s) + half * 64 * kSliceBytes), b_desc = pkit::smem_desc(p.b(s));
      pkit::wgmma_fence();
#pragma unroll
      for (int step = 0; step < kSliceBytes / 32; ++step)
        pkit::mma<BN, T>(d, a_desc + 2 * step, b_desc + 2 * step, kt > unit.k0 || step > 0);
      pkit::wgmma_commit();
      pkit::wgmma_wait<1>();  // the previous slice's products are done: release its stage
      if (kt > unit.k0 && threadIdx.x % 128 == 0) pkit::mbarrier_arrive(&p.empty[(it - 1) % kStages]);
    }
    pkit::wgmma_wait<0>();
    if (unit.k1 > unit.k0 && threadIdx.x % 128 == 0) pkit::mbarrier_arrive(&p.empty[(it - 1) % kStages]);
    if (work.splits > 1 && !sum_partials<BN>(d, half, unit, work, &p.last[half])) continue;
    put_tile<BN>(d, scale, p.outboxes[half], targets, tile.x * BM + half * 64, tile.y * BN);
  }
  if (threadIdx.x % 128 == 0) pkit::bulk_wait<0>();  // the tiles are written before the block ends
}

template <int BN, class T>
__global__ void __launch_bounds__(384, 1) gemm_tn(const __grid_constant__ ASources a,
                                                  const __grid_constant__ pkit::TensorMap b, int m, int n, int k,
                                                  const RowsReady rows, const __grid_constant__ TileTargets targets,
                                                  const Work work) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  constexpr int kStages = Shape<BN>::kStages;
  Pipeline<BN> p;
  p.stages = reinterpret_cast<unsigned char*>((reinterpret_cast<u64>(smem_raw) + 1023) & ~u64(1023));
  p.outboxes = reinterpret_cast<Outbox*>(p.stages + kStages * Shape<BN>::kStageBytes);
  p.full = reinterpret_cast<u64*>(p.outboxes + 2);
  p.empty = p.full + kStages;
  p.last = reinterpret_cast<int*>(p.empty + kStages);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      pkit::mbarrier_init(&p.full[s], 1);
      pkit::mbarrier_init(&p.empty[s], 2);  // one arrival per consumer warpgroup
    }
  }
  __syncthreads();
  Grid g{m, n, k, (m + BM - 1) / BM, (n + BN - 1) / BN, (k + T::kRowElements - 1) / T::kRowElements, 0};
  g.units = g.m_tiles * g.n_tiles * work.splits;
  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    pkit::registers_lower_to<Shape<BN>::kProducerRegisters>();
    if (threadIdx.x == 0) produce<BN, T>(a, b, g, rows, work, p);
  } else {
    pkit::registers_raise_to<Shape<BN>::kConsumerRegisters>();
    consume<BN, T>(warpgroup - 1, g, rows, targets, work, p);
  }
}
