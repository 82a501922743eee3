# Written by hand for pkit's test suite; NOT output of a language model.
"""Does not compile: a one-shot all-reduce kernel that loads every peer's bucket through a PeerTable
(register-level peer loads), with a misspelt identifier."""
import pkit

SOURCE = r'''
#include <pkit/peer.cuh>
extern "C" __global__ void one_shot_sum(pkit::PeerTable<float> peers, float* out, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float acc = 0.f;
    for (int r = 0; r < peers.size; ++r) acc += peers[r][i];
    out[i] = acc + missing_bias;
  }
}
'''
KERNEL = pkit.compile(SOURCE, "one_shot_sum", arch="sm_90a")


def solution(grad):
    raise NotImplementedError("never reached: the kernel fails to compile on import")
