// Kernels for the GPU tests of peer access, barriers and wait timeouts (one block per GPU unless noted).
#include <pkit/peer.cuh>
#include <pkit/sync.cuh>

// Push: write this rank's `src` into the buffer of rank (rank + 1) % size, 4-byte words.
extern "C" __global__ void push_to_next(const unsigned int* src, const unsigned long long* dst_bases, int rank,
                                        int size, unsigned long long n) {
  pkit::PeerTable<unsigned int> dst{dst_bases, rank, size};
  unsigned int* out = dst[dst.ring(1)];
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = src[i];
}

// Pull: read rank (rank - 1) % size's `src` buffer into this rank's `dst`.
extern "C" __global__ void pull_from_prev(unsigned int* dst, const unsigned long long* src_bases, int rank,
                                          int size, unsigned long long n) {
  pkit::PeerTable<const unsigned int> src{src_bases, rank, size};
  const unsigned int* in = src[src.ring(-1)];
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    dst[i] = in[i];
}

// `rounds` rounds, each: write a round-stamped value into every peer's mailbox slot for this rank, team
// barrier, check every slot of this rank's mailbox, barrier again. Block b uses mailbox row b and flag row
// b. errors[b] counts wrong values seen.
extern "C" __global__ void barrier_rounds(const unsigned long long* mailbox_bases, const unsigned long long* flag_bases,
                                          int rank, int size, int rounds, unsigned int* errors) {
  __shared__ unsigned int bad;
  if (threadIdx.x == 0) bad = 0;
  const unsigned long long row = blockIdx.x * size;
  unsigned long long flags[8];
  for (int q = 0; q < size; ++q) flags[q] = flag_bases[q] + blockIdx.x * (size + 1) * sizeof(unsigned int);
  for (int k = 1; k <= rounds; ++k) {
    if (int(threadIdx.x) < size) {
      auto* mailbox = reinterpret_cast<volatile unsigned int*>(mailbox_bases[threadIdx.x]);
      mailbox[row + rank] = unsigned(k) * 16u + unsigned(rank);
    }
    pkit::barrier(flags, rank, size, PKIT_SITE);
    if (int(threadIdx.x) < size) {
      auto* mine = reinterpret_cast<volatile unsigned int*>(mailbox_bases[rank]);
      if (mine[row + threadIdx.x] != unsigned(k) * 16u + threadIdx.x) atomicAdd(&bad, 1u);
    }
    pkit::barrier(flags, rank, size, PKIT_SITE);
  }
  if (threadIdx.x == 0) errors[blockIdx.x] = bad;
}

// Waits for a flag nobody sets: must trap after the pkit timeout and surface as pkit.PeerTimeout.
extern "C" __global__ void wait_forever(const unsigned int* flag) {
  pkit::wait_until(flag, 1u, PKIT_SITE);
}
