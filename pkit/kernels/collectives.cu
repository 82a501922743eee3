// Collectives over a team of GPUs with peer access, by register-level 16-byte loads and stores.
// Every kernel: one team barrier on entry (all ranks' buffers are ready and no one still reads the
// outputs), the data movement, one barrier on exit (every rank's writes have landed everywhere).
// Block b of every rank uses flag row b of team.barrier_flags, so all ranks launch the same grid.
// Sizes are in 16-byte packs; `chunk16` is one rank's share.
#include <pkit/peer.cuh>
#include <pkit/reduce.cuh>
#include <pkit/sync.cuh>

using pkit::thread_count;
using pkit::thread_index;
using pkit::u64;
using pkit::vec16;

struct Team {
  const u64* flag_bases;  // team.barrier_flags.table(rank)
  int rank;
  int size;
  __device__ u64 flag_row(int q) const { return flag_bases[q] + blockIdx.x * (size + 1) * sizeof(unsigned); }
  __device__ void barrier(pkit::Site site) const {
    u64 rows[8];
    for (int q = 0; q < size; ++q) rows[q] = flag_row(q);
    pkit::barrier(rows, rank, size, site);
  }
};


// out[q][rank * chunk16 + i] = in[i] for every rank q.
extern "C" __global__ void all_gather(const vec16* in, const u64* out_bases, u64 chunk16, const u64* flags,
                                      int rank, int size) {
  const Team team{flags, rank, size};
  const pkit::PeerTable<vec16> out{out_bases, rank, size};
  team.barrier(PKIT_SITE);
  for (u64 i = thread_index(); i < chunk16; i += thread_count()) {
    const vec16 v = pkit::load16(in + i);
    for (int q = 0; q < size; ++q) pkit::store16(out[out.ring(q)] + rank * chunk16 + i, v);
  }
  team.barrier(PKIT_SITE);
}

// out[q][rank * chunk16 + j] = in[rank][q * chunk16 + j] for every rank q. Each thread moves pack j of every
// share in one pass (peers first), so the local share's copy overlaps the link traffic.
extern "C" __global__ void all_to_all(const vec16* in, const u64* out_bases, u64 chunk16, const u64* flags,
                                      int rank, int size) {
  const Team team{flags, rank, size};
  const pkit::PeerTable<vec16> out{out_bases, rank, size};
  team.barrier(PKIT_SITE);
  for (u64 j = thread_index(); j < chunk16; j += thread_count()) {
    for (int d = 1; d <= size; ++d) {
      const int q = out.ring(d);  // start with the next rank: spread the links' load
      pkit::store16(out[q] + rank * chunk16 + j, pkit::load16(in + q * chunk16 + j));
    }
  }
  team.barrier(PKIT_SITE);
}

// out[i] = sum over ranks q of in[q][rank * chunk16 + i].
template <typename T>
__device__ void reduce_scatter(const u64* in_bases, vec16* out, u64 chunk16, const u64* flags, int rank, int size) {
  const Team team{flags, rank, size};
  team.barrier(PKIT_SITE);
  for (u64 i = thread_index(); i < chunk16; i += thread_count())
    pkit::store16(out + i, pkit::sum_pack<T>(in_bases, size, rank * chunk16 + i));
  team.barrier(PKIT_SITE);
}

// One shot: every rank reads all inputs whole and writes the sum to its own output.
template <typename T>
__device__ void all_reduce_one_shot(const u64* in_bases, vec16* out, u64 n16, const u64* flags, int rank, int size) {
  const Team team{flags, rank, size};
  team.barrier(PKIT_SITE);
  for (u64 i = thread_index(); i < n16; i += thread_count()) pkit::store16(out + i, pkit::sum_pack<T>(in_bases, size, i));
  team.barrier(PKIT_SITE);
}

// Two shot: rank r sums its share (reduce-scatter) and writes it into every rank's output (all-gather).
template <typename T>
__device__ void all_reduce_two_shot(const u64* in_bases, const u64* out_bases, u64 chunk16, const u64* flags,
                                    int rank, int size) {
  const Team team{flags, rank, size};
  const pkit::PeerTable<vec16> out{out_bases, rank, size};
  team.barrier(PKIT_SITE);
  for (u64 i = thread_index(); i < chunk16; i += thread_count()) {
    const vec16 v = pkit::sum_pack<T>(in_bases, size, rank * chunk16 + i);
    for (int q = 0; q < size; ++q) pkit::store16(out[out.ring(q)] + rank * chunk16 + i, v);
  }
  team.barrier(PKIT_SITE);
}

// Local step of the copy-engine reductions: out[i] = sum over ranks q (in rank order) of q's pack i, where
// this rank's own pack is mine[i] and peer q's was copied to stage[((q - rank) mod size - 1) * stage16 + i].
template <typename T>
__device__ void reduce_staged(const vec16* mine, const vec16* stage, u64 stage16, vec16* out, u64 n16, int rank,
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

#define PKIT_REDUCING(T, suffix)                                                                                    \
  extern "C" __global__ void reduce_scatter_##suffix(const u64* in, vec16* out, u64 chunk16, const u64* flags,     \
                                                     int rank, int size) {                                        \
    reduce_scatter<T>(in, out, chunk16, flags, rank, size);                                                       \
  }                                                                                                               \
  extern "C" __global__ void all_reduce_one_shot_##suffix(const u64* in, vec16* out, u64 n16, const u64* flags,    \
                                                          int rank, int size) {                                   \
    all_reduce_one_shot<T>(in, out, n16, flags, rank, size);                                                      \
  }                                                                                                               \
  extern "C" __global__ void all_reduce_two_shot_##suffix(const u64* in, const u64* out, u64 chunk16,              \
                                                          const u64* flags, int rank, int size) {                 \
    all_reduce_two_shot<T>(in, out, chunk16, flags, rank, size);                                                  \
  }                                                                                                               \
  extern "C" __global__ void reduce_staged_##suffix(const vec16* mine, const vec16* stage, u64 stage16, vec16* out, \
                                                    u64 n16, int rank, int size) {                                \
    reduce_staged<T>(mine, stage, stage16, out, n16, rank, size);                                                 \
  }

PKIT_REDUCING(float, f32)
PKIT_REDUCING(__nv_bfloat16, bf16)
