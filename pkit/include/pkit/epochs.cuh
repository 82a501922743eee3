// Call epochs counted in device memory, so calls replayed from a CUDA graph count on as launched ones do.
// `state` is one GPU's [epoch of the kernel's last call (0 before the first), blocks of the running call done].
// Every block reads the epoch at its start; the last block to finish stores the call's epoch, which the next
// launch on the stream sees. Epochs run 1, 2, ..., 2^32 - 2, then 1 again: never 0 (a zeroed flag's value), and
// consecutive ones alternate parity even across the wrap (pkit.ops.collectives.next_epoch is the host's copy).
#pragma once
#include "common.cuh"

namespace pkit {

__device__ __forceinline__ u32 begin_epoch(const u32* state) { return state[0] % 0xFFFFFFFEu + 1; }

__device__ __forceinline__ void end_epoch(u32* state, u32 epoch) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(state + 1, 1u) == gridDim.x - 1) {
      state[1] = 0;
      state[0] = epoch;
    }
  }
}

}  // namespace pkit
