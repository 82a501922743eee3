// Low-latency collectives: every value crosses the link once as LL packets (include/pkit/ll.cuh), and each
// thread waits only for the packets it sums. No barrier, no round trip: the latency floor is one write.
// Launch with every block resident (grid <= SMs): a thread waits for packets its peer's twin sends.
// Staging on every rank: [2 epoch parities][size senders][cap_lines 16-byte lines], zeroed once. Each call's
// epoch (1, 2, ...) is the packets' flag and picks the parity; it lives in device memory (LLCall::state), so a
// call replayed from a CUDA graph still gets a fresh one. The host passes a group shift g:
// packs go in groups of 2^g whose first halves fill 2^g consecutive lines and second halves the next 2^g.
// g = 0 interleaves each pack's two lines; g = 5 lets a warp's 32 lanes store and poll 512 contiguous bytes
// per instruction. cap_lines is a multiple of 2^(g+1).
#include <pkit/epochs.cuh>
#include <pkit/ll.cuh>
#include <pkit/reduce.cuh>

using pkit::ll_line;
using pkit::u32;
using pkit::thread_count;
using pkit::thread_index;
using pkit::u64;
using pkit::vec16;

// The arguments of every LL kernel, passed by value (pkit/ops/collectives.py LL_CALL mirrors this layout).
struct LLCall {
  const vec16* inp;
  vec16* out;
  u64 n16;           // packs per loop: the whole buffer (all-reduce) or one rank's share
  const u64* bases;  // every rank's staging buffer, as seen from this GPU
  u64 cap_lines;     // lines per (parity, sender)
  u32* state;        // this rank's [last call's epoch (0 before the first), blocks of this call done]
  u32 shift;         // group shift g
  int rank;
  int size;
  int root;          // a rooted op's root (broadcast, reduce); the others ignore it
};

// One call: its arguments, its epoch, and the staging addressing they imply.
struct Packets : LLCall {
  u32 epoch;  // 1, 2, ..., 2^32 - 2, then 1 again: never 0 (the staging's initial flag), parity alternating

  // Line `half` (0, 1) of pack i that `sender` writes into `receiver`'s staging this epoch.
  __device__ ll_line* line(int receiver, int sender, u64 i, u32 half) const {
    const u64 slot = ((i >> shift) << (shift + 1)) + (u64(half) << shift) + (i & ((1ull << shift) - 1));
    return reinterpret_cast<ll_line*>(bases[receiver]) + ((epoch & 1) * size + sender) * cap_lines + slot;
  }
  __device__ void send(int receiver, u64 i, const vec16& v) const {
    pkit::ll_send(line(receiver, rank, i, 0), line(receiver, rank, i, 1), v, epoch);
  }
  __device__ vec16 receive(int sender, u64 i, pkit::Site site) const {
    return pkit::ll_receive(line(rank, sender, i, 0), line(rank, sender, i, 1), epoch, site);
  }
  // A rooted op's token: one pack from each thread to each peer it sends no data, at the thread's index, so every
  // rank still hears from every peer in every call (see broadcast_ll). `except_rank` gets none (-1: every peer gets one).
  __device__ void send_tokens(int except_rank) const {
    for (int d = 1; d < size; ++d)
      if ((rank + d) % size != except_rank) send((rank + d) % size, thread_index(), vec16{});
  }
  __device__ void wait_tokens(int except_rank, pkit::Site site) const {
    for (int d = 1; d < size; ++d)
      if ((rank + d) % size != except_rank) receive((rank + d) % size, thread_index(), site);
  }
  // Sum over ranks q (in rank order, so every rank gets the same bits) of q's pack i; own pack is `mine`.
  template <typename T>
  __device__ vec16 sum(u64 i, const vec16& mine, pkit::Site site) const {
    float acc[pkit::Lanes<T>::kCount] = {};
    for (int q = 0; q < size; ++q) pkit::Lanes<T>::add(acc, q == rank ? mine : receive(q, i, site));
    return pkit::Lanes<T>::pack(acc);
  }
};

// This call's packets: the epoch after the last call's (every rank counts its calls alike, so they agree).
__device__ Packets begin_call(const LLCall& call) { return Packets{call, pkit::begin_epoch(call.state)}; }

// The last block to finish records this call's epoch for the next call (include/pkit/epochs.cuh).
__device__ void end_call(const Packets& c) { pkit::end_epoch(c.state, c.epoch); }

// Every thread first sends all its packs, then sums what arrived: a thread with several packs pays one
// link latency, not one per pack.

// out[i] = sum over ranks of in[i]: send own pack i to every peer, then sum the peers' packs i.
template <typename T>
__global__ void all_reduce_ll(const LLCall call) {
  const Packets c = begin_call(call);
  for (u64 i = thread_index(); i < c.n16; i += thread_count()) {
    const vec16 v = pkit::load16(c.inp + i);
    for (int d = 1; d < c.size; ++d) c.send((c.rank + d) % c.size, i, v);
  }
  for (u64 i = thread_index(); i < c.n16; i += thread_count())
    pkit::store16(c.out + i, c.sum<T>(i, pkit::load16(c.inp + i), PKIT_SITE));
  end_call(c);
}

// out[i] = sum over ranks q of in[q][rank * n16 + i]: send peer q its share, sum what the peers sent.
template <typename T>
__global__ void reduce_scatter_ll(const LLCall call) {
  const Packets c = begin_call(call);
  for (u64 i = thread_index(); i < c.n16; i += thread_count()) {
    for (int d = 1; d < c.size; ++d) {
      const int q = (c.rank + d) % c.size;
      c.send(q, i, pkit::load16(c.inp + q * c.n16 + i));
    }
  }
  for (u64 i = thread_index(); i < c.n16; i += thread_count())
    pkit::store16(c.out + i, c.sum<T>(i, pkit::load16(c.inp + c.rank * c.n16 + i), PKIT_SITE));
  end_call(c);
}

// Moves without a sum (all-gather: in_stride16 = 0; all-to-all: in_stride16 = n16): peer q gets pack i of
// in + q * in_stride16; the pack from sender s lands at out + s * n16 + i.
__device__ void exchange_ll(const Packets& c, u64 in_stride16) {
  for (u64 i = thread_index(); i < c.n16; i += thread_count()) {
    for (int d = 1; d < c.size; ++d) {
      const int q = (c.rank + d) % c.size;
      c.send(q, i, pkit::load16(c.inp + q * in_stride16 + i));
    }
  }
  for (u64 i = thread_index(); i < c.n16; i += thread_count()) {
    pkit::store16(c.out + c.rank * c.n16 + i, pkit::load16(c.inp + c.rank * in_stride16 + i));
    for (int d = 1; d < c.size; ++d) {
      const int s = (c.rank + d) % c.size;
      pkit::store16(c.out + s * c.n16 + i, c.receive(s, i, PKIT_SITE));
    }
  }
}

__global__ void all_gather_ll(const LLCall call) {
  const Packets c = begin_call(call);
  exchange_ll(c, 0);
  end_call(c);
}

__global__ void all_to_all_ll(const LLCall call) {
  const Packets c = begin_call(call);
  exchange_ll(c, c.n16);
  end_call(c);
}

// The rooted ops. A staging half is reused two calls later without a barrier because in every call each rank hears
// from every peer: a sender that finished call k + 1 heard from its receiver in k + 1, so the receiver had finished
// call k. Data of a rooted op flows one way only, so every pair of ranks that exchanges no data exchanges a token
// per thread instead (all ranks launch the same grid); a thread still waits for one link crossing.

// out[i] = in[root][i] on every rank: the root sends its packs to every peer and keeps its own; the peers store
// what arrives and send tokens to every peer.
__global__ void broadcast_ll(const LLCall call) {
  const Packets c = begin_call(call);
  if (c.rank == c.root) {
    for (u64 i = thread_index(); i < c.n16; i += thread_count()) {
      const vec16 v = pkit::load16(c.inp + i);
      for (int d = 1; d < c.size; ++d) c.send((c.rank + d) % c.size, i, v);
      pkit::store16(c.out + i, v);
    }
    c.wait_tokens(-1, PKIT_SITE);
  } else {
    c.send_tokens(-1);
    for (u64 i = thread_index(); i < c.n16; i += thread_count()) pkit::store16(c.out + i, c.receive(c.root, i, PKIT_SITE));
    c.wait_tokens(c.root, PKIT_SITE);
  }
  end_call(c);
}

// out[i] = sum over ranks q of in[q][i] on the root only: the peers send their packs to the root and tokens to
// every other peer; the root sends tokens to every peer and sums what arrives. Other ranks' outputs are not written.
template <typename T>
__global__ void reduce_ll(const LLCall call) {
  const Packets c = begin_call(call);
  if (c.rank == c.root) {
    c.send_tokens(-1);
    for (u64 i = thread_index(); i < c.n16; i += thread_count())
      pkit::store16(c.out + i, c.sum<T>(i, pkit::load16(c.inp + i), PKIT_SITE));
  } else {
    for (u64 i = thread_index(); i < c.n16; i += thread_count()) c.send(c.root, i, pkit::load16(c.inp + i));
    c.send_tokens(c.root);
    c.wait_tokens(-1, PKIT_SITE);
  }
  end_call(c);
}
