// Lesson step 3 (pkit.lesson.check_flag), a flag that publishes data: rank 0 runs `produce`, rank 1 `consume`,
// one block each, for `rounds` rounds. In round k (1, 2, ...) the producer writes k into the n words of `data`
// (on the consumer's GPU) and then sets `flag` (there too) to k; the consumer waits for the flag, copies what it
// reads into its row k - 1 of `seen`, and acknowledges through `ack` (on the producer's GPU). pkit::signal is a
// release (earlier stores land first); pkit::wait_until an acquire (later loads see what the signaller wrote),
// with pkit's timeout.
#include <pkit/sync.cuh>

using pkit::u32;
using pkit::u64;

extern "C" __global__ void produce(u32* data, u32* flag, const u32* ack, u64 n, u32 rounds) {
  for (u32 k = 1; k <= rounds; ++k) {
    if (threadIdx.x == 0) pkit::wait_until(ack, k - 1, PKIT_SITE);  // the consumer is done with round k - 1
    __syncthreads();
    for (u64 i = threadIdx.x; i < n; i += blockDim.x) data[i] = k;
    __syncthreads();
    if (threadIdx.x == 0) pkit::signal(flag, k);
  }
}

extern "C" __global__ void consume(const u32* data, const u32* flag, u32* ack, u32* seen, u64 n, u32 rounds) {
  for (u32 k = 1; k <= rounds; ++k) {
    if (threadIdx.x == 0) pkit::wait_until(flag, k, PKIT_SITE);
    __syncthreads();
    for (u64 i = threadIdx.x; i < n; i += blockDim.x) seen[(k - 1) * n + i] = data[i];
    __syncthreads();
    if (threadIdx.x == 0) pkit::signal(ack, k);
  }
}
