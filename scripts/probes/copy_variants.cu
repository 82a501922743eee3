// Exploratory peer-copy variants (session 3 probe, not a pkit mechanism): does any SM-driven copy close the
// gap to the copy engine at 1 GiB? Each kernel copies n16 16-byte words; launch on the source GPU to push,
// on the destination GPU to pull.
#include <pkit/vec.cuh>

using pkit::u64;
using pkit::vec16;

// Read-only load that asks the L2 to fetch the whole 256-byte block around the address.
__device__ __forceinline__ vec16 load16_l2_256(const void* p) {
  vec16 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// Streaming store: evict-first in the caches on the way.
__device__ __forceinline__ void store16_cs(void* p, const vec16& v) {
  asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

// Grid-stride copy with U loads in flight per thread. kLoad: 0 plain nc, 1 L2::256B hint. kStore: 0 plain, 1 .cs
template <int U, int kLoad, int kStore>
__device__ void copy_grid(vec16* dst, const vec16* src, u64 n16) {
  const u64 stride = u64(gridDim.x) * blockDim.x;
  u64 i = u64(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (U - 1) * stride < n16; i += U * stride) {
    vec16 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = kLoad ? load16_l2_256(src + i + u * stride) : pkit::load16_nc(src + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (kStore) store16_cs(dst + i + u * stride, v[u]); else pkit::store16(dst + i + u * stride, v[u]);
    }
  }
  for (; i < n16; i += stride) pkit::store16(dst + i, pkit::load16_nc(src + i));
}

// Each block copies one contiguous span (blocks own disjoint ranges), U loads in flight per thread.
template <int U>
__device__ void copy_spans(vec16* dst, const vec16* src, u64 n16) {
  const u64 per = (n16 + gridDim.x - 1) / gridDim.x;
  const u64 begin = blockIdx.x * per, end = begin + per < n16 ? begin + per : n16;
  u64 i = begin + threadIdx.x;
  for (; i + (U - 1) * blockDim.x < end; i += U * blockDim.x) {
    vec16 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = pkit::load16_nc(src + i + u * blockDim.x);
#pragma unroll
    for (int u = 0; u < U; ++u) pkit::store16(dst + i + u * blockDim.x, v[u]);
  }
  for (; i < end; i += blockDim.x) pkit::store16(dst + i, pkit::load16_nc(src + i));
}

extern "C" __global__ void copy_u8(vec16* d, const vec16* s, u64 n) { copy_grid<8, 0, 0>(d, s, n); }
extern "C" __global__ void copy_u4_l2(vec16* d, const vec16* s, u64 n) { copy_grid<4, 1, 0>(d, s, n); }
extern "C" __global__ void copy_u4_cs(vec16* d, const vec16* s, u64 n) { copy_grid<4, 0, 1>(d, s, n); }
extern "C" __global__ void copy_spans_u4(vec16* d, const vec16* s, u64 n) { copy_spans<4>(d, s, n); }
extern "C" __global__ void copy_spans_u8(vec16* d, const vec16* s, u64 n) { copy_spans<8>(d, s, n); }
