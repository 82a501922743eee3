// Thread block clusters (sm_90): the blocks of a cluster run at once on one GPC and reach each other's shared
// memory. A block learns its rank in the cluster, the cluster waits for all its threads, a thread arrives on an
// mbarrier of another block of the cluster, and one TMA load lands in the shared memory of several blocks at once
// (multicast), each block's mbarrier at the same offset counting the bytes that reach it.
#pragma once
#include "common.cuh"
#include "tma.cuh"

namespace pkit {

// This block's rank in its cluster (0 .. cluster size - 1).
__device__ __forceinline__ u32 cluster_rank() {
  u32 rank;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}

// Every thread of every block of the cluster reaches this point before any goes on; shared-memory writes before
// it (mbarrier initialisations included) are seen by the cluster's blocks after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// Arrive once on the mbarrier at `bar`'s offset in the shared memory of block `rank` of this cluster (this block's
// own rank too), with a local arrive's CTA-scope release: enough to hand back a stage whose reads are complete
// (a consumer's wgmma_wait), and no fence. A cluster-scope release would put a GPU-wide memory barrier
// (MEMBAR.ALL.GPU in the SASS) before every arrive.
__device__ __forceinline__ void mbarrier_arrive_in(u64* bar, u32 rank) {
  asm volatile(
      "{ .reg .b32 remote; mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote]; }"
      ::"r"(smem_addr(bar)), "r"(rank) : "memory");
}

// The box of a 2D tensor map whose corner is column x, row y (elements) -> the shared memory at `smem_dst`'s offset
// in every block of the cluster whose bit is set in `blocks`, each completing its bytes on its mbarrier at `bar`'s
// offset.
__device__ __forceinline__ void tensor_load_2d_multicast(void* smem_dst, const TensorMap& map, int x, int y, u64* bar,
                                                         unsigned short blocks) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;"
      ::"r"(smem_addr(smem_dst)), "l"(reinterpret_cast<u64>(&map)), "r"(x), "r"(y), "r"(smem_addr(bar)), "h"(blocks)
      : "memory");
}

}  // namespace pkit
