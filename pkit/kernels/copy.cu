// Copies between any two addresses a GPU can reach (its own memory, a peer's, or mapped pinned host memory over
// PCIe), 16 bytes per access.
#include <pkit/vec.cuh>

// Copy n16 16-byte words from src to dst; launch on the GPU whose SMs should move the data
// (the source's GPU to push, the destination's to pull; the one GPU of a local or host copy).
extern "C" __global__ void copy16(uint4* dst, const uint4* src, unsigned long long n16) {
  pkit::copy16_grid(dst, src, n16);
}
