// Read bandwidth of one memory level: every thread reads 16-byte words, four loads in flight, and folds
// them into a checksum so no load can be dropped. The grid size and working set pick the level.
#include <pkit/chase.cuh>

using pkit::u32;
using pkit::u64;

template <pkit::Via V>
__device__ __forceinline__ uint4 load16_via(const uint4* p) {
  uint4 v;
  if constexpr (V == pkit::Via::L1)
    asm volatile("ld.global.ca.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else
    asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

__device__ __forceinline__ uint4 load16_shared(const uint4* p) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(static_cast<u32>(__cvta_generic_to_shared(p))));
  return v;
}

__device__ __forceinline__ u32 fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

// Read words [first, n16) with step `step`, `passes` times; the checksum goes to sink[0] only if it
// equals a value the data never produces, which the compiler cannot know.
template <typename Load>
__device__ __forceinline__ void read_words(const uint4* src, u64 n16, u64 first, u64 step, u32 passes, u32* sink,
                                           Load load) {
  u32 acc = 0;
  for (u32 pass = 0; pass < passes; ++pass) {
    u64 i = first;
    for (; i + 3 * step < n16; i += 4 * step)
      acc ^= fold(load(src + i)) ^ fold(load(src + i + step)) ^ fold(load(src + i + 2 * step)) ^
             fold(load(src + i + 3 * step));
    for (; i < n16; i += step) acc ^= fold(load(src + i));
  }
  if (acc == 0x9E3779B9u) sink[0] = acc;
}

// The grid splits [0, n16) among its threads: L2, HBM, peer HBM over NVLink, host memory over PCIe.
// Bytes read per launch: passes * n16 * 16.
extern "C" __global__ void read_grid_l2(const uint4* src, u64 n16, u32 passes, u32* sink) {
  read_words(src, n16, u64(blockIdx.x) * blockDim.x + threadIdx.x, u64(gridDim.x) * blockDim.x, passes, sink,
             [](const uint4* p) { return load16_via<pkit::Via::L2>(p); });
}

// Every block reads all of [0, n16) through its SM's L1 (keep n16 * 16 within L1).
// Bytes read per launch: gridDim.x * passes * n16 * 16.
extern "C" __global__ void read_block_l1(const uint4* src, u64 n16, u32 passes, u32* sink) {
  read_words(src, n16, threadIdx.x, blockDim.x, passes, sink,
             [](const uint4* p) { return load16_via<pkit::Via::L1>(p); });
}

// Every block copies [0, n16) into shared memory (n16 * 16 bytes dynamic) and reads it `passes` times.
// Bytes read per launch (from shared memory): gridDim.x * passes * n16 * 16.
extern "C" __global__ void read_block_shared(const uint4* src, u64 n16, u32 passes, u32* sink) {
  extern __shared__ __align__(16) uint4 words[];
  for (u64 i = threadIdx.x; i < n16; i += blockDim.x) words[i] = src[i];
  __syncthreads();
  read_words(words, n16, threadIdx.x, blockDim.x, passes, sink, [](const uint4* p) { return load16_shared(p); });
}
