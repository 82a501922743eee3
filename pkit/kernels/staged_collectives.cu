// Collectives between plain (non-symmetric) buffers, one process per GPU: each rank copies what its peers
// need from its input into its own half of a symmetric staging buffer, meets them at one team barrier, then
// pulls what it needs from their staging into its output. Every write is local, so input and output can be any
// 16-byte-aligned device memory (a torch tensor); only the staging is peer-mapped.
//
// One barrier per call (two for the two-shot all-reduce): consecutive calls use the two halves of the staging in
// turn, so a rank may copy call k + 1's input while a slower peer still reads call k's. Call k + 2 reuses call k's
// half only after passing call k + 1's barrier, which every peer reaches only after finishing call k (kernels of a
// rank run in stream order). The half is the parity of the call's epoch, counted in device memory
// (include/pkit/epochs.cuh), so CUDA-graph replays alternate too. Block b of every rank copies and reads the same
// packs (grid-stride over one share), so the per-block barrier orders exactly the writes each block's reads depend
// on. All ranks launch the same grid. Kernels are named by NVRTC name expressions (pkit/dist.py STAGED_KERNELS),
// e.g. "staged_all_reduce<float>".
#include <pkit/epochs.cuh>
#include <pkit/reduce.cuh>
#include <pkit/sync.cuh>

using pkit::thread_count;
using pkit::thread_index;
using pkit::u32;
using pkit::u64;
using pkit::vec16;

// The arguments of every staged collective, by value (pkit/dist.py STAGED_CALL mirrors this layout).
struct StagedCall {
  const vec16* x;       // this rank's input (plain memory)
  vec16* y;             // this rank's output (plain memory)
  const u64* stage;     // peer table of the staging buffer: two halves of `half16` packs each
  u64 half16;           // packs per staging half
  u64 share16;          // packs per share: one rank's part of the collective
  const u64* flags;     // peer table of team.barrier_flags
  u32* state;           // this rank's call epochs (include/pkit/epochs.cuh)
  int rank;
  int size;
};

// One call: its arguments, its epoch, and the staging half the epoch picks.
struct Staged : StagedCall {
  u32 epoch;

  __device__ explicit Staged(const StagedCall& call) : StagedCall(call), epoch(pkit::begin_epoch(call.state)) {}
  // Rank q's staging half of this call, from share `s` on.
  __device__ const vec16* staged(int q, int s) const {
    return reinterpret_cast<const vec16*>(stage[q]) + (epoch & 1) * half16 + u64(s) * share16;
  }
  __device__ vec16* my_stage(int s) const { return const_cast<vec16*>(staged(rank, s)); }
  __device__ void barrier(pkit::Site site) const { pkit::block_barrier(flags, rank, size, site); }
  __device__ void end() const { pkit::end_epoch(state, epoch); }
  // Copy x, one share, into this rank's staging: what every peer reads.
  __device__ void stage_input() const {
    for (u64 i = thread_index(); i < share16; i += thread_count()) pkit::store16(my_stage(0) + i, pkit::load16(x + i));
  }
  // Copy every share of x but this rank's own into this rank's staging: peer s reads share s.
  __device__ void stage_peer_shares() const {
    for (u64 i = thread_index(); i < share16; i += thread_count())
      for (int s = 0; s < size; ++s)
        if (s != rank) pkit::store16(my_stage(s) + i, pkit::load16(x + u64(s) * share16 + i));
  }
};

// Sum over ranks q (in rank order, so every rank gets the same bits) of pack i of share s: x itself for this
// rank, q's staging for the others.
template <typename T>
__device__ vec16 sum_share(const Staged& c, int s, u64 i) {
  return pkit::sum_loads<T>(c.size, [&](int q) { return q == c.rank ? c.x + u64(s) * c.share16 + i : c.staged(q, s) + i; });
}

// y = sum over ranks of x (one shot: every rank reads every input whole; share16 = the whole buffer).
template <typename T>
__global__ void staged_all_reduce(const StagedCall call) {
  const Staged c(call);
  c.stage_input();
  c.barrier(PKIT_SITE);
  for (u64 i = thread_index(); i < c.share16; i += thread_count()) pkit::store16(c.y + i, sum_share<T>(c, 0, i));
  c.end();
}

// y = sum over ranks of x, two shot (x: size shares): rank r sums share r (staged by its peers) into y and into its
// own staging's share r, which it never stages input into; after a second barrier it pulls every peer's summed
// share from there. 2 (size - 1) / size of the buffer crosses each rank's links, against size - 1 buffers one shot.
template <typename T>
__global__ void staged_all_reduce_two_shot(const StagedCall call) {
  const Staged c(call);
  c.stage_peer_shares();
  c.barrier(PKIT_SITE);
  for (u64 i = thread_index(); i < c.share16; i += thread_count()) {
    const vec16 v = sum_share<T>(c, c.rank, i);
    pkit::store16(c.y + u64(c.rank) * c.share16 + i, v);
    pkit::store16(c.my_stage(c.rank) + i, v);
  }
  c.barrier(PKIT_SITE);
  for (u64 i = thread_index(); i < c.share16; i += thread_count())
    for (int d = 1; d < c.size; ++d) {
      const int q = (c.rank + d) % c.size;
      pkit::store16(c.y + u64(q) * c.share16 + i, pkit::load16(c.staged(q, q) + i));
    }
  c.end();
}

// y = concatenation over ranks q of x[q] (x: one share).
__global__ void staged_all_gather(const StagedCall call) {
  const Staged c(call);
  c.stage_input();
  c.barrier(PKIT_SITE);
  for (u64 i = thread_index(); i < c.share16; i += thread_count())
    for (int d = 0; d < c.size; ++d) {
      const int q = (c.rank + d) % c.size;  // own share first, then the peers in ring order
      pkit::store16(c.y + u64(q) * c.share16 + i, pkit::load16(q == c.rank ? c.x + i : c.staged(q, 0) + i));
    }
  c.end();
}

// y = sum over ranks q of share `rank` of x[q] (x: size shares). Peers only ever read the shares they own, so
// this rank stages every share but its own.
template <typename T>
__global__ void staged_reduce_scatter(const StagedCall call) {
  const Staged c(call);
  c.stage_peer_shares();
  c.barrier(PKIT_SITE);
  for (u64 i = thread_index(); i < c.share16; i += thread_count()) pkit::store16(c.y + i, sum_share<T>(c, c.rank, i));
  c.end();
}

// Share q of y = share `rank` of x[q] (x and y: size shares each).
__global__ void staged_all_to_all(const StagedCall call) {
  const Staged c(call);
  c.stage_peer_shares();
  c.barrier(PKIT_SITE);
  for (u64 i = thread_index(); i < c.share16; i += thread_count())
    for (int d = 0; d < c.size; ++d) {
      const int q = (c.rank + d) % c.size;
      const vec16* from = q == c.rank ? c.x + u64(c.rank) * c.share16 + i : c.staged(q, c.rank) + i;
      pkit::store16(c.y + u64(q) * c.share16 + i, pkit::load16(from));
    }
  c.end();
}
