// Sums of 16-byte packs of fp32 (4 lanes) or bf16 (8 lanes), accumulated in fp32.
#pragma once
#include <cuda_bf16.h>

#include "vec.cuh"

namespace pkit {

template <typename T>
struct Lanes;

template <>
struct Lanes<float> {
  static constexpr int kCount = 4;
  __device__ static void add(float* acc, const vec16& v) {
    const float* f = reinterpret_cast<const float*>(&v);
#pragma unroll
    for (int i = 0; i < kCount; ++i) acc[i] += f[i];
  }
  __device__ static vec16 pack(const float* acc) {
    vec16 v;
    float* f = reinterpret_cast<float*>(&v);
#pragma unroll
    for (int i = 0; i < kCount; ++i) f[i] = acc[i];
    return v;
  }
};

template <>
struct Lanes<__nv_bfloat16> {
  static constexpr int kCount = 8;
  __device__ static void add(float* acc, const vec16& v) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < kCount / 2; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      acc[2 * i] += f.x;
      acc[2 * i + 1] += f.y;
    }
  }
  __device__ static vec16 pack(const float* acc) {
    vec16 v;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < kCount / 2; ++i) h[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
    return v;
  }
};

constexpr int kMaxSummands = 8;  // the largest team (pkit.ops.collectives.MAX_TEAM)

// Sum over q < count (at most kMaxSummands) of the pack at `at(q)`, in q order, accumulated in fp32. Every load is
// issued before the first add: the loads are independent, so a thread waits for one round trip to its peers,
// not one per rank.
template <typename T, typename At>
__device__ __forceinline__ vec16 sum_loads(int count, At at) {
  vec16 v[kMaxSummands];
#pragma unroll
  for (int q = 0; q < kMaxSummands; ++q)
    if (q < count) v[q] = load16(at(q));
  float acc[Lanes<T>::kCount] = {};
#pragma unroll
  for (int q = 0; q < kMaxSummands; ++q)
    if (q < count) Lanes<T>::add(acc, v[q]);
  return Lanes<T>::pack(acc);
}

// Sum of pack `i` over `count` buffers (addresses in `bases`, e.g. every rank's input), in buffer order,
// so every GPU that sums the same pack gets identical bits.
template <typename T>
__device__ __forceinline__ vec16 sum_pack(const u64* bases, int count, u64 i) {
  return sum_loads<T>(count, [&](int q) { return reinterpret_cast<const vec16*>(bases[q]) + i; });
}

}  // namespace pkit
