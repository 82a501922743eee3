// Copy through shared memory with TMA bulk copies: each block streams chunks global -> shared -> global,
// double-buffered. Either side may be a peer GPU's memory.
#include <pkit/tma.cuh>

// dst, src: 16-byte aligned; bytes: multiple of 16. chunk: bytes per stage (multiple of 16,
// 2 * chunk + 16 bytes of dynamic shared memory).
extern "C" __global__ void tma_copy(char* dst, const char* src, unsigned long long bytes, unsigned int chunk) {
  extern __shared__ __align__(128) char smem[];
  char* stage[2] = {smem, smem + chunk};
  auto* bars = reinterpret_cast<pkit::u64*>(smem + 2 * chunk);
  if (threadIdx.x != 0) return;
  pkit::mbarrier_init(&bars[0], 1);
  pkit::mbarrier_init(&bars[1], 1);
  const unsigned long long nchunks = (bytes + chunk - 1) / chunk;
  unsigned int k = 0;
  for (unsigned long long c = blockIdx.x; c < nchunks; c += gridDim.x, ++k) {
    const int s = k & 1;
    const unsigned long long off = c * chunk;
    const unsigned int n = static_cast<unsigned int>(bytes - off < chunk ? bytes - off : chunk);
    pkit::bulk_wait_read<1>();  // the store that last used this stage has read it
    pkit::mbarrier_expect_bytes(&bars[s], n);
    pkit::bulk_load(stage[s], src + off, n, &bars[s]);
    pkit::mbarrier_wait(&bars[s], (k >> 1) & 1, PKIT_SITE);
    pkit::bulk_store(dst + off, stage[s], n);
    pkit::bulk_commit();
  }
  pkit::bulk_wait<0>();
}
