// Latency by pointer chasing (include/pkit/chase.cuh). Launch every kernel with one block; one thread
// chases. Global chains hold absolute 64-bit addresses (local, peer or mapped host memory); the Python
// side writes them (pkit/experiments/hierarchy_chase.py).
#include <pkit/chase.cuh>

using pkit::u32;
using pkit::u64;

// out[0] = cycles and out[1] = ns of the `hops` timed links, out[2] = the address reached.
template <pkit::Via V>
__device__ __forceinline__ void chase_global(u64 start, u64 warm, u64 hops, u64* out) {
  pkit::ChaseTiming t;
  const u64 end = pkit::chase(start, warm, hops, [](u64 a) { return pkit::chase_load<V>(a); }, t);
  out[0] = t.cycles;
  out[1] = t.ns;
  out[2] = end;
}

// Loads through L1 (ld.global.ca): L1, L2 and HBM levels by working-set size.
extern "C" __global__ void chase_l1(u64 start, u64 warm, u64 hops, u64* out) {
  chase_global<pkit::Via::L1>(start, warm, hops, out);
}

// Loads that bypass L1 (ld.global.cg): L2, HBM, peer HBM over NVLink, host memory over PCIe.
extern "C" __global__ void chase_l2(u64 start, u64 warm, u64 hops, u64* out) {
  chase_global<pkit::Via::L2>(start, warm, hops, out);
}

// Shared memory: the block copies the chain into dynamic shared memory (n_slots * stride bytes), slot i
// linking to slot next_slot[i]; thread 0 chases from slot 0. out[2] = the slot reached.
extern "C" __global__ void chase_shared(const u32* next_slot, u32 n_slots, u32 stride, u64 warm, u64 hops,
                                        u64* out) {
  extern __shared__ __align__(16) unsigned char smem[];
  const u32 base = static_cast<u32>(__cvta_generic_to_shared(smem));
  for (u32 i = threadIdx.x; i < n_slots; i += blockDim.x)
    *reinterpret_cast<u32*>(smem + u64(i) * stride) = base + next_slot[i] * stride;
  __syncthreads();
  if (threadIdx.x != 0) return;
  pkit::ChaseTiming t;
  const u32 end = pkit::chase(base, warm, hops, [](u32 a) { return pkit::chase_load_shared(a); }, t);
  out[0] = t.cycles;
  out[1] = t.ns;
  out[2] = (end - base) / stride;
}

// Per-hop cycles through L2 (ld.global.cg), to see near and far L2 partitions; end[0] = address reached.
extern "C" __global__ void chase_profile_l2(u64 start, u32 hops, u32* cycles, u64* end) {
  end[0] = pkit::chase_each(start, hops, cycles, [](u64 a) { return pkit::chase_load<pkit::Via::L2>(a); });
}
