// Pointer chasing: one thread follows a chain of addresses where every load needs the previous load's
// result, so nothing overlaps and the time per hop is the latency of the memory level holding the chain.
// Timing: SM clock cycles (clock64) and nanoseconds (global timer) around the timed hops.
#pragma once
#include "common.cuh"

namespace pkit {

// Which caches a global load may hit: ld.global.ca (L1, then L2) or ld.global.cg (L2 only, L1 bypassed).
enum class Via { L1, L2 };

template <Via V>
__device__ __forceinline__ u64 chase_load(u64 address) {
  u64 next;
  if constexpr (V == Via::L1)
    asm volatile("ld.global.ca.u64 %0, [%1];" : "=l"(next) : "l"(address) : "memory");
  else
    asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(next) : "l"(address) : "memory");
  return next;
}

// Shared-memory chase: links are 32-bit shared-window addresses.
__device__ __forceinline__ u32 chase_load_shared(u32 address) {
  u32 next;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(next) : "r"(address) : "memory");
  return next;
}

__device__ __forceinline__ u64 clock_cycles() {
  u64 t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory");
  return t;
}

// Stall until `value` has arrived: a store cannot issue before its operand is ready, so a clock read
// placed after settle() is ordered after the load that produced `value`.
template <typename T>
__device__ __forceinline__ void settle(T value) {
  __shared__ volatile T sink;
  sink = value;
}

struct ChaseTiming {
  u64 cycles;  // SM clock cycles of the timed hops
  u64 ns;      // global-timer nanoseconds of the timed hops
};

// Follow `warm` untimed links from `start` (to fill caches and TLBs), then `hops` timed ones with `load`.
// Returns the address reached after warm + hops links.
template <typename Address, typename Load>
__device__ __forceinline__ Address chase(Address start, u64 warm, u64 hops, Load load, ChaseTiming& timing) {
  Address p = start;
  for (u64 i = 0; i < warm; ++i) p = load(p);
  settle(p);
  const u64 c0 = clock_cycles(), t0 = globaltimer_ns();
  for (u64 i = 0; i < hops; ++i) p = load(p);
  settle(p);
  timing.cycles = clock_cycles() - c0;
  timing.ns = globaltimer_ns() - t0;
  return p;
}

// Per-hop latencies: cycles[i] is hop i's SM-clock time, including a fixed overhead (two clock reads
// and a shared store) that the caller subtracts by comparing with chase().
template <typename Load>
__device__ __forceinline__ u64 chase_each(u64 start, u32 hops, u32* cycles, Load load) {
  u64 p = start;
  for (u32 i = 0; i < hops; ++i) {
    const u64 c0 = clock_cycles();
    p = load(p);
    settle(p);
    cycles[i] = static_cast<u32>(clock_cycles() - c0);
  }
  return p;
}

}  // namespace pkit
