// C = A · Bᵀ in bf16 with fp32 accumulation on Hopper tensor cores: A is M × K, B is N × K (both K-contiguous,
// as nn.Linear keeps its weight), C is M × N, all row-major. A block computes 128 × 256 tiles of C: a
// producer thread streams 64-wide K slices of A and B into kStages shared-memory stages with TMA, and two
// consumer warpgroups each multiply their 64 rows with wgmma as the slices land. Full/empty mbarriers pass
// each stage between them. Launch with 384 threads and kSmemBytes of dynamic shared memory. Finished tiles
// leave through shared memory by TMA (TileTargets): stored to C, or added into other tensors, a peer's
// included: the epilogue of GEMM + reduce-scatter and GEMM + all-reduce.
#include <cuda_bf16.h>
#include <pkit/sync.cuh>
#include <pkit/tma.cuh>
#include <pkit/wgmma.cuh>

using pkit::u32;
using pkit::u64;

constexpr int BM = 128, BN = 256, BK = 64, kStages = 4, kGroupM = 16, kMaxTargets = 8;
constexpr u32 kStageBytes = (BM + BN) * BK * 2;
// Registers per thread after the hand-over (65536 per SM, 168 each at launch): the producer needs few, each
// consumer holds a 64 × 256 fp32 accumulator. 128 · 40 + 256 · 232 = 64512 = 384 · 168.
constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;

struct Stage {
  __nv_bfloat16 a[BM * BK];
  __nv_bfloat16 b[BN * BK];
};
// A consumer's staging for the TMA epilogue: 64 rows × 128 columns, as two 64 × 64 boxes with 128-byte rows.
struct Outbox {
  __nv_bfloat16 box[2][64 * 64];
};
constexpr int kSmemBytes = kStages * sizeof(Stage) + 2 * sizeof(Outbox) + 2 * kStages * sizeof(u64) + 1024;
static_assert(kSmemBytes == 230464, "pkit/ops/gemm.py SMEM_BYTES and the launch's tile sizes mirror these");

// Where the rows of A come from: source q holds rows [q * rows_per_source, (q + 1) * rows_per_source) as its own
// row-major tensor, read in 128 × 64 boxes (pkit/ops/gemm.py a_sources). One source for a plain GEMM; one per
// rank for the fused all-gather, whose producers read peers' rows over NVLink as they multiply them.
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

// The (row, column) tile of C this block computes: groups of kGroupM row tiles sweep the columns together,
// so the blocks running at once share their A and B slices in L2.
__device__ int2 tile_of(int block, int m_tiles, int n_tiles) {
  const int group = block / (kGroupM * n_tiles), first = group * kGroupM;
  const int rows = min(kGroupM, m_tiles - first), in_group = block % (kGroupM * n_tiles);
  return make_int2(first + in_group % rows, in_group / rows);
}

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

// Barrier among the 128 threads of this consumer warpgroup (named barriers 1 and 2; 0 is __syncthreads).
__device__ __forceinline__ void warpgroup_sync() {
  if (threadIdx.x < 256) {
    asm volatile("bar.sync 1, 128;" ::: "memory");
  } else {
    asm volatile("bar.sync 2, 128;" ::: "memory");
  }
}

// Rows row0.. (64) of this warpgroup's accumulator (layout: include/pkit/wgmma.cuh), rounded to bf16 and put into
// the targets through `out`, 128 columns at a time: each thread writes its fragment into the boxes (128-byte
// swizzle: 16-byte chunk c of row r sits at c ^ (r % 8)), then one thread stores or adds both boxes into every
// target the rows belong to. The last half's boxes are read out while the next tile is multiplied.
__device__ void put_tile(const float (&d)[128], Outbox& out, const TileTargets& targets, int row0, int col0) {
  const int t = threadIdx.x % 128;
  const int row = 16 * (t / 32) + (t % 32) / 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (t == 0) pkit::bulk_wait_read<0>();  // the boxes are free again (the last half's, or last tile's, reads)
    warpgroup_sync();
#pragma unroll
    for (int i = 16 * h; i < 16 * h + 16; ++i) {
      const int col = 8 * (i - 16 * h) + 2 * (t % 4), box = col / 64, chunk = (col % 64) / 8;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = row + 8 * half;
        const __nv_bfloat162 pair = __floats2bfloat162_rn(d[4 * i + 2 * half], d[4 * i + 2 * half + 1]);
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

// The shared memory of a block: kStages stages of A and B slices, an epilogue outbox per consumer, and each stage's
// full (loaded) and empty (released by both consumers) mbarriers.
struct Pipeline {
  Stage* stages;
  Outbox* outboxes;
  u64* full;
  u64* empty;
};

// The tiles block b computes: b, b + gridDim.x, ... (persistent; a grid smaller than the SMs leaves SMs to
// others), each as (row tile, column tile), row tiles rotated to start at rows.first_row_tile.
__device__ int2 nth_tile(int t, int m_tiles, int n_tiles, const RowsReady& rows) {
  int2 tile = tile_of(t, m_tiles, n_tiles);
  tile.x = (tile.x + rows.first_row_tile) % m_tiles;
  return tile;
}

// The producer thread: for each of this block's tiles, once its rows of A are ready, stream the K slices of A and
// B into the stages as the consumers free them. K slice `it` (counted over all tiles) uses stage it % kStages.
__device__ void produce(const ASources& a, const pkit::TensorMap& b, int m, int k, const RowsReady& rows,
                        int m_tiles, int n_tiles, const Pipeline& p) {
  const int k_tiles = (k + BK - 1) / BK;
  u32 it = 0;
  for (int t = blockIdx.x; t < m_tiles * n_tiles; t += gridDim.x) {
    const int2 tile = nth_tile(t, m_tiles, n_tiles, rows);
    rows.wait(tile.x * BM, min(m, (tile.x + 1) * BM));
    const int source = tile.x * BM / a.rows_per_source, row = tile.x * BM - source * a.rows_per_source;
    for (int kt = 0; kt < k_tiles; ++kt, ++it) {
      const int s = it % kStages;
      if (it >= kStages) pkit::mbarrier_wait(&p.empty[s], (it / kStages - 1) & 1, PKIT_SITE);
      pkit::mbarrier_expect_bytes(&p.full[s], kStageBytes);
      pkit::tensor_load_2d(p.stages[s].a, a.maps[source], kt * BK, row, &p.full[s]);
      pkit::tensor_load_2d(p.stages[s].b, b, kt * BK, tile.y * BN, &p.full[s]);
    }
  }
}

// A consumer warpgroup (half 0 or 1): for each tile, multiply its 64 rows by the 256 columns as the slices land,
// release each stage once its products are done, then put the 64 × 256 result into the targets.
__device__ void consume(int half, int k, const RowsReady& rows, int m_tiles, int n_tiles, const TileTargets& targets,
                        const Pipeline& p) {
  const int k_tiles = (k + BK - 1) / BK;
  u32 it = 0;
  for (int t = blockIdx.x; t < m_tiles * n_tiles; t += gridDim.x) {
    const int2 tile = nth_tile(t, m_tiles, n_tiles, rows);
    float d[128];  // this consumer's 64 × 256 fp32 accumulator
    for (int kt = 0; kt < k_tiles; ++kt, ++it) {
      const int s = it % kStages;
      pkit::mbarrier_wait(&p.full[s], (it / kStages) & 1, PKIT_SITE);
      const u64 a_desc = pkit::smem_desc(p.stages[s].a + half * 64 * BK), b_desc = pkit::smem_desc(p.stages[s].b);
      pkit::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) pkit::mma_64x256x16_bf16(d, a_desc + 2 * kk, b_desc + 2 * kk, kt + kk > 0);
      pkit::wgmma_commit();
      pkit::wgmma_wait<1>();  // the previous slice's products are done: release its stage
      if (kt > 0 && threadIdx.x % 128 == 0) pkit::mbarrier_arrive(&p.empty[(it - 1) % kStages]);
    }
    pkit::wgmma_wait<0>();
    if (threadIdx.x % 128 == 0) pkit::mbarrier_arrive(&p.empty[(it - 1) % kStages]);
    put_tile(d, p.outboxes[half], targets, tile.x * BM + half * 64, tile.y * BN);
  }
  if (threadIdx.x % 128 == 0) pkit::bulk_wait<0>();  // the tiles are written before the block ends
}

__global__ void __launch_bounds__(384, 1) gemm_bf16_tn(const __grid_constant__ ASources a,
                                                       const __grid_constant__ pkit::TensorMap b,
                                                       int m, int n, int k, const RowsReady rows,
                                                       const __grid_constant__ TileTargets targets) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  Pipeline p;
  p.stages = reinterpret_cast<Stage*>((reinterpret_cast<u64>(smem_raw) + 1023) & ~u64(1023));
  p.outboxes = reinterpret_cast<Outbox*>(p.stages + kStages);
  p.full = reinterpret_cast<u64*>(p.outboxes + 2);
  p.empty = p.full + kStages;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      pkit::mbarrier_init(&p.full[s], 1);
      pkit::mbarrier_init(&p.empty[s], 2);  // one arrival per consumer warpgroup
    }
  }
  __syncthreads();
  const int warpgroup = threadIdx.x / 128, m_tiles = (m + BM - 1) / BM, n_tiles = (n + BN - 1) / BN;
  if (warpgroup == 0) {
    pkit::registers_lower_to<kProducerRegisters>();
    if (threadIdx.x == 0) produce(a, b, m, k, rows, m_tiles, n_tiles, p);
  } else {
    pkit::registers_raise_to<kConsumerRegisters>();
    consume(warpgroup - 1, k, rows, m_tiles, n_tiles, targets, p);
  }
}
