// Lesson step 4 (pkit.lesson.check_barrier), a barrier built from signal and wait: every rank pushes its n floats
// into slot `rank` of every rank's `box`, meets the others at a barrier, then copies its own box to `out`.
// One block per rank; `flags[q]` is rank q's array of `size` flags, `epoch` a value new to every call.
#include <pkit/sync.cuh>

using pkit::u32;
using pkit::u64;

extern "C" __global__ void exchange(const u64* box, const u64* flags, const float* in, float* out, u64 n, u32 epoch,
                                    int rank, int size) {
  for (int q = 0; q < size; ++q)
    for (u64 i = threadIdx.x; i < n; i += blockDim.x) reinterpret_cast<float*>(box[q])[rank * n + i] = in[i];
  __syncthreads();
  if (int(threadIdx.x) < size) {  // thread q tells rank q "my stores have landed", then waits for rank q to say so
    pkit::signal(reinterpret_cast<u32*>(flags[threadIdx.x]) + rank, epoch);
    pkit::wait_until(reinterpret_cast<const u32*>(flags[rank]) + threadIdx.x, epoch, PKIT_SITE);
  }
  __syncthreads();
  const float* mine = reinterpret_cast<const float*>(box[rank]);
  for (u64 i = threadIdx.x; i < size * n; i += blockDim.x) out[i] = mine[i];
}
