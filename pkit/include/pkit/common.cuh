// pkit device basics: fixed-width types, the global nanosecond timer, grid-stride indices, call-site records.
#pragma once

namespace pkit {

using u8 = unsigned char;
using u32 = unsigned int;
using u64 = unsigned long long;
using i64 = long long;

// Nanoseconds from the GPU's global timer (advances in ~32 ns to 1 µs steps, same clock on every SM).
__device__ __forceinline__ u64 globaltimer_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Grid-stride loops: this thread's index over the whole grid, and the number of threads in the grid.
__device__ __forceinline__ u64 thread_index() { return u64(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ u64 thread_count() { return u64(gridDim.x) * blockDim.x; }

// Where a wait was called from, for the timeout report: kernel (function) name and source line.
struct Site {
  const char* function;
  int line;
};

}  // namespace pkit

#define PKIT_SITE (::pkit::Site{__func__, __LINE__})
