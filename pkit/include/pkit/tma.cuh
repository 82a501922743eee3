// Tensor Memory Accelerator bulk copies (sm_90): contiguous global <-> shared transfers done by the copy
// hardware of the SM, one thread issuing, completion tracked on an mbarrier (loads) or a bulk group (stores).
// Global addresses may be a peer GPU's memory. Sizes and addresses must be multiples of 16 bytes.
#pragma once
#include "common.cuh"
#include "sync.cuh"

namespace pkit {

__device__ __forceinline__ u32 smem_addr(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

// A 4-byte store to shared memory at shared-window address `addr` (as smem_addr gives).
__device__ __forceinline__ void store_shared(u32 addr, u32 value) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(value) : "memory");
}

__device__ __forceinline__ void mbarrier_init(u64* bar, u32 arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Announce `bytes` of incoming transactions and arrive once.
__device__ __forceinline__ void mbarrier_expect_bytes(u64* bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ bool mbarrier_try_wait(u64* bar, u32 phase) {
  u32 done;
  asm volatile(
      "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
      : "=r"(done) : "r"(smem_addr(bar)), "r"(phase) : "memory");
  return done != 0;
}

// Wait for the mbarrier's phase `phase` (0, 1, 0, ...) to complete; traps after the pkit timeout. The timeout is
// read once, before the loop: a global load between two tries would delay the wait's return by its latency
// whenever the phase completes during it (a GEMM producer waiting for a freed stage lost that time per slice).
__device__ __forceinline__ void mbarrier_wait(u64* bar, u32 phase, Site site) {
  if (mbarrier_try_wait(bar, phase)) return;
  const u64 start = globaltimer_ns(), limit = pkit_wait_timeout_ns;
  while (!mbarrier_try_wait(bar, phase)) {
    const u64 waited = globaltimer_ns() - start;
    if (waited > limit)
      report_timeout_and_trap(reinterpret_cast<const u32*>(bar), phase, ~0u, waited, site);
  }
}

// Global (local or peer) -> shared, completing `bytes` on `bar`.
__device__ __forceinline__ void bulk_load(void* smem_dst, const void* gmem_src, u32 bytes, u64* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(smem_addr(smem_dst)), "l"(gmem_src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}

// A TMA tensor map (CUtensorMap, encoded on the host by cuTensorMapEncodeTiled: pkit/ops/gemm.py), passed to a
// kernel as a `const __grid_constant__` parameter so its address stays in parameter space.
struct alignas(64) TensorMap {
  u64 opaque[16];
};

// The box of a 2D tensor map whose corner is column x, row y (elements) -> shared, completing on `bar`; parts of
// the box outside the tensor arrive as zeros.
__device__ __forceinline__ void tensor_load_2d(void* smem_dst, const TensorMap& map, int x, int y, u64* bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               ::"r"(smem_addr(smem_dst)), "l"(reinterpret_cast<u64>(&map)), "r"(x), "r"(y), "r"(smem_addr(bar))
               : "memory");
}

// Shared box -> the tensor at column x, row y, added elementwise to what is there (TMA reduce, the owner's memory
// may be a peer's); parts outside the tensor are dropped. Completes with bulk_commit() + bulk_wait*.
__device__ __forceinline__ void tensor_add_2d(const TensorMap& map, int x, int y, const void* smem_src) {
  asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2}], [%3];"
               ::"l"(reinterpret_cast<u64>(&map)), "r"(x), "r"(y), "r"(smem_addr(smem_src)) : "memory");
}

// Shared box -> the tensor at column x, row y (TMA store); parts outside the tensor are dropped. Completes with
// bulk_commit() + bulk_wait*.
__device__ __forceinline__ void tensor_store_2d(const TensorMap& map, int x, int y, const void* smem_src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];"
               ::"l"(reinterpret_cast<u64>(&map)), "r"(x), "r"(y), "r"(smem_addr(smem_src)) : "memory");
}

// Arrive once on `bar` (e.g. a consumer releasing a stage to its producer).
__device__ __forceinline__ void mbarrier_arrive(u64* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Shared -> global (local or peer); completes with bulk_commit() + bulk_wait_read<N>() / bulk_wait<N>().
__device__ __forceinline__ void bulk_store(void* gmem_dst, const void* smem_src, u32 bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
               ::"l"(gmem_dst), "r"(smem_addr(smem_src)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Wait until at most N committed store groups are still reading their shared-memory source.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// Wait until at most N committed store groups are incomplete (their writes done).
template <int N>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

// Order earlier generic-proxy shared-memory writes before later bulk (async-proxy) reads of them.
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

}  // namespace pkit
