// Low-latency (LL) packets: data and a flag travel in the same store, so a receiver needs no barrier.
// One 16-byte line carries 8 bytes of data as two (4-byte word, 4-byte flag) halves, written by a single
// 16-byte store; each 8-byte half lands whole, so a half whose flag equals the sender's epoch holds that
// epoch's word. The cost is twice the bytes on the link; the gain is no round trip before or after.
// Callers double-buffer the lines by epoch parity (see pkit/ops/collectives.py), so flags never reset.
#pragma once
#include "sync.cuh"
#include "vec.cuh"

namespace pkit {

using ll_line = uint4;  // {word 0, flag, word 1, flag}

__device__ __forceinline__ void ll_store(ll_line* line, u32 word0, u32 word1, u32 flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(line), "r"(word0), "r"(flag), "r"(word1),
               "r"(flag)
               : "memory");
}

// Send one 16-byte pack as two lines, its first half to `lo` and its second to `hi`.
__device__ __forceinline__ void ll_send(ll_line* lo, ll_line* hi, const vec16& v, u32 flag) {
  ll_store(lo, v.x, v.y, flag);
  ll_store(hi, v.z, v.w, flag);
}

// Spin until both halves of `line` carry `flag`, then return its two data words; trap after the timeout.
__device__ __forceinline__ uint2 ll_wait(const ll_line* line, u32 flag, Site site) {
  ll_line v;
  u64 start = 0;
  const u64 limit = pkit_wait_timeout_ns;  // read once: each poll is one load of the line and a clock read
  for (;;) {
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(line) : "memory");
    if (v.y == flag && v.w == flag) return make_uint2(v.x, v.z);
    const u64 now = globaltimer_ns();
    if (start == 0) start = now;
    if (now - start > limit)
      report_timeout_and_trap(reinterpret_cast<const u32*>(line) + 1, flag, v.y, now - start, site);
  }
}

// Receive one 16-byte pack sent by ll_send to the same two lines.
__device__ __forceinline__ vec16 ll_receive(const ll_line* lo, const ll_line* hi, u32 flag, Site site) {
  const uint2 a = ll_wait(lo, flag, site), b = ll_wait(hi, flag, site);
  return make_uint4(a.x, a.y, b.x, b.y);
}

}  // namespace pkit
