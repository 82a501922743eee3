// Delay primitives: hold a stream for a known time, or until the host releases it.
#pragma once
#include "common.cuh"
#include "sync.cuh"

namespace pkit {

// Busy-wait `ns` nanoseconds by the global timer.
__device__ __forceinline__ void spin_for(u64 ns) {
  const u64 start = globaltimer_ns();
  while (globaltimer_ns() - start < ns) {
  }
}

}  // namespace pkit
