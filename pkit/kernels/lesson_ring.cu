// Lesson step 5 (pkit.lesson.check_ring), one step of a ring all-reduce over size · chunk floats, one block per
// rank. Chunk c is elements [c · chunk, (c + 1) · chunk). In every step each rank pulls one chunk from the
// previous rank: steps 0 .. size - 2 add it to the rank's own input (reduce-scatter; after them each rank holds
// one chunk's full sum), steps size - 1 .. 2 · size - 3 copy it (all-gather). A team barrier ends every step,
// so the next step reads what this one wrote. `inp`, `out`: peer tables; `flags`: peer table of size + 1 words.
#include <pkit/peer.cuh>
#include <pkit/sync.cuh>

using pkit::u64;

extern "C" __global__ void ring_step(const u64* inp, const u64* out, const u64* flags, u64 chunk, int step, int rank,
                                     int size) {
  const pkit::PeerTable<float> in{inp, rank, size}, res{out, rank, size};
  const int prev = in.ring(-1);
  const u64 first = in.ring(-step - 1) * chunk;  // the chunk this rank completes in this step
  const float* from = (step == 0 ? in[prev] : res[prev]) + first;
  if (step < size - 1) {
    for (u64 i = threadIdx.x; i < chunk; i += blockDim.x) res.local()[first + i] = from[i] + in.local()[first + i];
  } else {
    for (u64 i = threadIdx.x; i < chunk; i += blockDim.x) res.local()[first + i] = from[i];
  }
  pkit::barrier(flags, rank, size, PKIT_SITE);
}
