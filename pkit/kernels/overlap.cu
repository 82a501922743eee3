// Communication kernels of the overlap schedules (pkit/ops/overlap.py): they move rows of A into every rank's
// gathered copy on a few SMs and release a ready flag per chunk, which pkit's GEMM (gemm.cu, RowsReady) waits for
// while it computes on the other SMs.
#include <pkit/peer.cuh>
#include <pkit/sync.cuh>
#include <pkit/vec.cuh>

using pkit::u32;
using pkit::u64;
using pkit::vec16;

// The arguments of pull_rows, passed by value (pkit/ops/overlap.py PULL_ROWS mirrors this layout).
struct PullRows {
  const u64* gathered;  // peer table of the gathered A (M × K bf16 per rank; rank q's rows are its shard)
  u32* ready;           // this rank's flags, one per chunk of rows
  u32* arrivals;        // this rank's per-chunk count of blocks done with it (zero between calls)
  u64 chunk16;          // 16-byte packs per chunk
  int chunks_per_rank;  // chunks in one rank's shard
  u32 epoch;
  int rank;
  int size;
};

// Every block copies its share of each of the peers' chunks in turn (next rank first, the order the GEMM takes
// them) into this rank's gathered A; the last block done with a chunk resets its count and releases its flag.
// Block 0 first flags this rank's own chunks, which are in place already.
__global__ void pull_rows(const PullRows c) {
  const pkit::PeerTable<vec16> gathered{c.gathered, c.rank, c.size};
  if (blockIdx.x == 0)
    for (int j = threadIdx.x; j < c.chunks_per_rank; j += blockDim.x)
      pkit::store_release_sys(c.ready + c.rank * c.chunks_per_rank + j, c.epoch);
  const u64 first = u64(blockIdx.x) * blockDim.x + threadIdx.x, stride = u64(gridDim.x) * blockDim.x;
  for (int j = 0; j < (c.size - 1) * c.chunks_per_rank; ++j) {
    const int q = gathered.ring(1 + j / c.chunks_per_rank);
    const u64 chunk = u64(q) * c.chunks_per_rank + j % c.chunks_per_rank;
    pkit::copy16_strided(gathered.local() + chunk * c.chunk16, gathered[q] + chunk * c.chunk16, c.chunk16, first,
                         stride);
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      if (atomicAdd(c.arrivals + chunk, 1u) == gridDim.x - 1) {
        c.arrivals[chunk] = 0;
        pkit::signal(c.ready + chunk, c.epoch);
      }
    }
  }
}
