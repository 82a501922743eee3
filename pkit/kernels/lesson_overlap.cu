// Lesson step 6 (pkit.lesson.check_overlap), chunks computed on as they land: every rank's `send_chunks` pushes
// its rows chunk by chunk into the next rank and releases that chunk's flag there; the receiver's
// `consume_chunks` computes on each chunk as soon as its flag says it has landed, while later chunks travel.
#include <pkit/sync.cuh>

using pkit::u32;
using pkit::u64;

// One block: rows[k · chunk + i] = x[k · chunk + i] for chunk k = 0, 1, ..., then ready[k] = epoch. `rows` and
// `ready` are the next rank's.
extern "C" __global__ void send_chunks(float* rows, const float* x, u32* ready, u64 chunk, int chunks, u32 epoch) {
  for (int k = 0; k < chunks; ++k) {
    for (u64 i = threadIdx.x; i < chunk; i += blockDim.x) rows[k * chunk + i] = x[k * chunk + i];
    __syncthreads();
    if (threadIdx.x == 0) pkit::signal(ready + k, epoch);
  }
}

// Block k: out = 2 · rows over chunk k, once ready[k] has reached epoch.
extern "C" __global__ void consume_chunks(const float* rows, const u32* ready, float* out, u64 chunk, u32 epoch) {
  const u64 first = u64(blockIdx.x) * chunk;
  if (threadIdx.x == 0) pkit::wait_until(ready + blockIdx.x, epoch, PKIT_SITE);
  __syncthreads();
  for (u64 i = threadIdx.x; i < chunk; i += blockDim.x) out[first + i] = 2.0f * rows[first + i];
}
