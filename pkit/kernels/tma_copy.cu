// Copy through shared memory with TMA bulk copies: one thread per block keeps kStages chunk loads in
// flight (global -> shared, completing on mbarriers) and stores each chunk as soon as it lands
// (shared -> global). Either side may be a peer GPU's memory (push: run on the source GPU; pull: on the
// destination GPU) or mapped pinned host memory (run on the one GPU; whether bulk copies reach host memory is
// checked on the GPU by tests/test_mechanisms.py, ROUTE_MECHANISMS in pkit/ops/transfers.py decides).
#include <pkit/tma.cuh>

constexpr int kStages = 4;

struct ChunkPlan {
  const char* src;
  char* dst;
  unsigned long long bytes;
  unsigned int chunk;
  // Byte offset and length of this block's j-th chunk (blocks take chunks round-robin).
  __device__ unsigned long long offset(unsigned long long j) const { return (j * gridDim.x + blockIdx.x) * chunk; }
  __device__ unsigned int length(unsigned long long j) const {
    const unsigned long long off = offset(j);
    return static_cast<unsigned int>(bytes - off < chunk ? bytes - off : chunk);
  }
  __device__ unsigned long long count() const {
    const unsigned long long total = (bytes + chunk - 1) / chunk;
    return total > blockIdx.x ? (total - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  }
};

// dst, src: 16-byte aligned; bytes: multiple of 16; chunk: bytes per stage (multiple of 16).
// Dynamic shared memory: kStages * chunk + 8 * kStages bytes.
extern "C" __global__ void tma_copy(char* dst, const char* src, unsigned long long bytes, unsigned int chunk) {
  extern __shared__ __align__(128) char smem[];
  auto* bars = reinterpret_cast<pkit::u64*>(smem + kStages * chunk);
  if (threadIdx.x != 0) return;
  const ChunkPlan plan{src, dst, bytes, chunk};
  const unsigned long long n = plan.count();
  auto load = [&](unsigned long long j) {
    const int s = j % kStages;
    pkit::mbarrier_expect_bytes(&bars[s], plan.length(j));
    pkit::bulk_load(smem + s * chunk, src + plan.offset(j), plan.length(j), &bars[s]);
  };
  for (int s = 0; s < kStages; ++s) pkit::mbarrier_init(&bars[s], 1);
  for (unsigned long long j = 0; j < n && j < kStages; ++j) load(j);
  for (unsigned long long j = 0; j < n; ++j) {
    const int s = j % kStages;
    pkit::mbarrier_wait(&bars[s], (j / kStages) & 1, PKIT_SITE);
    pkit::bulk_store(dst + plan.offset(j), smem + s * chunk, plan.length(j));
    pkit::bulk_commit();
    if (j + kStages < n) {
      pkit::bulk_wait_read<0>();  // the store has read stage s: refill it
      load(j + kStages);
    }
  }
  pkit::bulk_wait<0>();
}
