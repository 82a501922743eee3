// Collectives over a team of GPUs with peer access, by register-level 16-byte loads and stores.
// Every kernel: one team barrier on entry (all ranks' buffers are ready and no one still reads the
// outputs), the data movement, one barrier on exit (every rank's writes have landed everywhere).
// Block b of every rank uses flag row b of team.barrier_flags, so all ranks launch the same grid.
// Sizes are in 16-byte packs. Kernels are C++ templates named by NVRTC name expressions
// (pkit/ops/collectives.py SM_KERNELS), e.g. "all_reduce_two_shot<__nv_bfloat16>".
#include <pkit/peer.cuh>
#include <pkit/reduce.cuh>
#include <pkit/sync.cuh>

using pkit::thread_count;
using pkit::thread_index;
using pkit::u64;
using pkit::vec16;

// The arguments of every SM collective, passed by value (pkit/ops/collectives.py SM_CALL mirrors this layout).
struct SMCall {
  const u64* inp;    // peer table of the input: in[q] is rank q's input, as seen from this GPU
  const u64* out;    // peer table of the output
  u64 n16;           // packs per loop: one rank's share, or the whole buffer (one shot)
  const u64* flags;  // peer table of team.barrier_flags
  int rank;
  int size;
  int root;          // a rooted op's root (broadcast, reduce); the others ignore it

  __device__ pkit::PeerTable<vec16> inputs() const { return {inp, rank, size}; }
  __device__ pkit::PeerTable<vec16> outputs() const { return {out, rank, size}; }
  // Barrier over the team on this block's flag row.
  __device__ void barrier(pkit::Site site) const { pkit::block_barrier(flags, rank, size, site); }
};

// out[q][at + i] = in[i] for every rank q: this rank's input stored into every rank's output, itself first.
__device__ void store_everywhere(const SMCall& c, u64 at) {
  const auto in = c.inputs().local();
  const auto out = c.outputs();
  for (u64 i = thread_index(); i < c.n16; i += thread_count()) {
    const vec16 v = pkit::load16(in + i);
    for (int q = 0; q < c.size; ++q) pkit::store16(out[out.ring(q)] + at + i, v);
  }
}

// out[i] = sum over ranks q of in[q][i], into this rank's own output.
template <typename T>
__device__ void sum_into_own_output(const SMCall& c) {
  const auto out = c.outputs().local();
  for (u64 i = thread_index(); i < c.n16; i += thread_count()) pkit::store16(out + i, pkit::sum_pack<T>(c.inp, c.size, i));
}

// out[q][rank * n16 + i] = in[i] for every rank q.
__global__ void all_gather(const SMCall c) {
  c.barrier(PKIT_SITE);
  store_everywhere(c, c.rank * c.n16);
  c.barrier(PKIT_SITE);
}

// out[q][i] = in[root][i] for every rank q: the root stores its input into every output; the other ranks only meet
// it at the barriers (their inputs are not read).
__global__ void broadcast(const SMCall c) {
  c.barrier(PKIT_SITE);
  if (c.rank == c.root) store_everywhere(c, 0);
  c.barrier(PKIT_SITE);
}

// out[q][rank * n16 + j] = in[rank][q * n16 + j] for every rank q. Each thread moves pack j of every share in
// one pass (peers first), so the local share's copy overlaps the link traffic.
__global__ void all_to_all(const SMCall c) {
  const auto in = c.inputs().local();
  const auto out = c.outputs();
  c.barrier(PKIT_SITE);
  for (u64 j = thread_index(); j < c.n16; j += thread_count()) {
    for (int d = 1; d <= c.size; ++d) {
      const int q = out.ring(d);  // start with the next rank: spread the links' load
      pkit::store16(out[q] + c.rank * c.n16 + j, pkit::load16(in + q * c.n16 + j));
    }
  }
  c.barrier(PKIT_SITE);
}

// out[i] = sum over ranks q of in[q][rank * n16 + i].
template <typename T>
__global__ void reduce_scatter(const SMCall c) {
  const auto out = c.outputs().local();
  c.barrier(PKIT_SITE);
  for (u64 i = thread_index(); i < c.n16; i += thread_count())
    pkit::store16(out + i, pkit::sum_pack<T>(c.inp, c.size, c.rank * c.n16 + i));
  c.barrier(PKIT_SITE);
}

// One shot: every rank reads all inputs whole and writes the sum to its own output.
template <typename T>
__global__ void all_reduce_one_shot(const SMCall c) {
  c.barrier(PKIT_SITE);
  sum_into_own_output<T>(c);
  c.barrier(PKIT_SITE);
}

// out[root] = sum over ranks q of in[q]: the root reads every input whole; the other ranks' outputs are not written.
template <typename T>
__global__ void reduce(const SMCall c) {
  c.barrier(PKIT_SITE);
  if (c.rank == c.root) sum_into_own_output<T>(c);
  c.barrier(PKIT_SITE);
}

// Two shot: rank r sums its share (reduce-scatter) and writes it into every rank's output (all-gather).
template <typename T>
__global__ void all_reduce_two_shot(const SMCall c) {
  const auto out = c.outputs();
  c.barrier(PKIT_SITE);
  for (u64 i = thread_index(); i < c.n16; i += thread_count()) {
    const vec16 v = pkit::sum_pack<T>(c.inp, c.size, c.rank * c.n16 + i);
    for (int q = 0; q < c.size; ++q) pkit::store16(out[out.ring(q)] + c.rank * c.n16 + i, v);
  }
  c.barrier(PKIT_SITE);
}

// Local step of the copy-engine reductions: out[i] = sum over ranks q (in rank order) of q's pack i, where
// this rank's own pack is mine[i] and peer q's was copied to stage[((q - rank) mod size - 1) * stage16 + i].
template <typename T>
__global__ void reduce_staged(const vec16* mine, const vec16* stage, u64 stage16, vec16* out, u64 n16, int rank,
                              int size) {
  for (u64 i = thread_index(); i < n16; i += thread_count()) {
    float acc[pkit::Lanes<T>::kCount] = {};
    for (int q = 0; q < size; ++q) {
      const vec16* part = q == rank ? mine + i : stage + ((q - rank + size) % size - 1) * stage16 + i;
      pkit::Lanes<T>::add(acc, pkit::load16(part));
    }
    pkit::store16(out + i, pkit::Lanes<T>::pack(acc));
  }
}
