// Signals, waits and barriers between GPUs, with system-scope release/acquire semantics.
// Every wait has a timeout: on expiry it writes a report to host memory and traps, so a missing signal
// becomes pkit.PeerTimeout in Python instead of a hung GPU.
#pragma once
#include "common.cuh"

namespace pkit {

// Written once (first timeout wins) into pinned host memory that pkit maps for every module.
struct WaitReport {
  u32 claimed;
  int line;
  int device;
  u32 expected;
  u32 observed;
  u32 reserved;
  u64 flag_address;
  u64 waited_ns;
  char function[64];
};
static_assert(sizeof(WaitReport) == 104, "pkit/waits.py reads this layout");

}  // namespace pkit

// Set by pkit when it loads a module (pkit/waits.py); a module that never waits simply leaves them unused.
extern "C" __device__ pkit::WaitReport* pkit_wait_report = nullptr;
extern "C" __device__ unsigned long long pkit_wait_timeout_ns = 10000000000ull;
extern "C" __device__ int pkit_device_ordinal = -1;

namespace pkit {

__device__ __forceinline__ u32 load_acquire_sys(const u32* p) {
  u32 v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_release_sys(u32* p, u32 v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void add_release_sys(u32* p, u32 v) {
  asm volatile("red.release.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// True when a counter `v` has reached `target`, robust to 32-bit wrap-around.
__device__ __forceinline__ bool reached(u32 v, u32 target) { return int(v - target) >= 0; }

// Inlined, not called: a function call inside a warpgroup that changed its register limit (setmaxnreg, as pkit's
// GEMM does) makes ptxas refuse the change.
__device__ __forceinline__ void report_timeout_and_trap(const u32* flag, u32 expected, u32 observed, u64 waited,
                                                        Site site) {
  WaitReport* r = pkit_wait_report;
  if (r != nullptr && atomicCAS(&r->claimed, 0u, 1u) == 0u) {
    r->line = site.line;
    r->device = pkit_device_ordinal;
    r->expected = expected;
    r->observed = observed;
    r->flag_address = reinterpret_cast<u64>(flag);
    r->waited_ns = waited;
    int i = 0;
    for (; i < 63 && site.function[i] != '\0'; ++i) r->function[i] = site.function[i];
    r->function[i] = '\0';
    __threadfence_system();
  }
  __trap();
}

// Spin until *flag reaches `target` (acquire, system scope), or trap after pkit_wait_timeout_ns (read once, before
// the loop, so that each poll is one load of the flag and a clock read).
__device__ __forceinline__ void wait_until(const u32* flag, u32 target, Site site) {
  u32 v = load_acquire_sys(flag);
  if (reached(v, target)) return;
  const u64 start = globaltimer_ns(), limit = pkit_wait_timeout_ns;
  while (!reached(v = load_acquire_sys(flag), target)) {
    const u64 waited = globaltimer_ns() - start;
    if (waited > limit) report_timeout_and_trap(flag, target, v, waited, site);
  }
}

// Make this block's earlier writes visible system-wide, then set a (possibly peer's) flag to `value`.
// Call from one thread after __syncthreads().
__device__ __forceinline__ void signal(u32* flag, u32 value) {
  __threadfence_system();
  store_release_sys(flag, value);
}

// Team barrier for one block per GPU. `flags` is a PeerTable-style list of each rank's flag array
// (size + 1 words: one slot per peer, then this block's epoch counter). All ranks' blocks with the same
// flag arrays must call it equally often. Orders all writes before it (local and peer) before all
// reads after it, on every GPU of the team.
__device__ __forceinline__ void barrier(const u64* flags, int rank, int size, Site site) {
  __shared__ u32 epoch;
  u32* mine = reinterpret_cast<u32*>(flags[rank]);
  __syncthreads();
  if (threadIdx.x == 0) {
    epoch = mine[size] + 1;
    mine[size] = epoch;
  }
  __syncthreads();
  if (int(threadIdx.x) < size) {
    u32* peer = reinterpret_cast<u32*>(flags[threadIdx.x]);
    signal(peer + rank, epoch);
    wait_until(mine + threadIdx.x, epoch, site);
  }
  __syncthreads();
}

// The barrier of block blockIdx.x of a kernel over the team, on that block's row of pkit.Team.barrier_flags
// (`table`: every rank's flags as seen from this GPU; rows of size + 1 words; at most 8 ranks).
__device__ __forceinline__ void block_barrier(const u64* table, int rank, int size, Site site) {
  u64 rows[8];
  for (int q = 0; q < size; ++q) rows[q] = table[q] + blockIdx.x * (size + 1) * sizeof(u32);
  barrier(rows, rank, size, site);
}

}  // namespace pkit
