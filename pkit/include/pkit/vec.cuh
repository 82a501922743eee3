// 16-byte vector loads and stores: the widest single access a thread can make to global memory,
// local or a peer's (over NVLink each 16-byte store is one write request).
#pragma once
#include "common.cuh"

namespace pkit {

using vec16 = uint4;

__device__ __forceinline__ vec16 load16(const void* p) {
  return *reinterpret_cast<const vec16*>(p);
}

// Read-only path: for data no thread writes during the kernel.
__device__ __forceinline__ vec16 load16_nc(const void* p) {
  vec16 v;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

__device__ __forceinline__ void store16(void* p, const vec16& v) {
  *reinterpret_cast<vec16*>(p) = v;
}

// Copy of n16 16-byte words, this thread taking words first, first + stride, ...; src and dst may each be local
// or a peer's memory. Four independent loads are in flight per thread before the first store.
__device__ __forceinline__ void copy16_strided(vec16* dst, const vec16* src, u64 n16, u64 first, u64 stride) {
  u64 i = first;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    vec16 a = load16_nc(src + i), b = load16_nc(src + i + stride);
    vec16 c = load16_nc(src + i + 2 * stride), d = load16_nc(src + i + 3 * stride);
    store16(dst + i, a); store16(dst + i + stride, b);
    store16(dst + i + 2 * stride, c); store16(dst + i + 3 * stride, d);
  }
  for (; i < n16; i += stride) store16(dst + i, load16_nc(src + i));
}

// The copy spread over the whole grid, or over one block.
__device__ __forceinline__ void copy16_grid(vec16* dst, const vec16* src, u64 n16) {
  copy16_strided(dst, src, n16, u64(blockIdx.x) * blockDim.x + threadIdx.x, u64(gridDim.x) * blockDim.x);
}
__device__ __forceinline__ void copy16_block(vec16* dst, const vec16* src, u64 n16) {
  copy16_strided(dst, src, n16, threadIdx.x, blockDim.x);
}

}  // namespace pkit
