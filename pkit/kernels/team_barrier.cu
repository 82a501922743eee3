// One cross-GPU synchronisation step, timed: `steps` team barriers back to back in one block per GPU, on flag
// row 0 of team.barrier_flags (`flags` is its peer table). Launch one block of at least `size` threads on every
// rank; the kernel's time over `steps` is α, the latency of one step, without launch overhead
// (pkit/experiments/ceilings.py sync_latency). Waits time out and trap (pkit/sync.cuh).
#include <pkit/sync.cuh>

extern "C" __global__ void team_barriers(const pkit::u64* flags, int rank, int size, unsigned int steps) {
  for (unsigned int i = 0; i < steps; ++i) pkit::barrier(flags, rank, size, PKIT_SITE);
}
