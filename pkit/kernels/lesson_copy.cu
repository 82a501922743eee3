// Lesson step 2 (pkit.lesson.check_copy), a first peer-copy kernel: every rank pushes its n floats into the
// next rank's buffer with ordinary stores, which travel over NVLink.
#include <pkit/common.cuh>

using pkit::u64;

// table[q]: address of rank q's destination buffer. The grid-stride loop covers any n with any grid.
extern "C" __global__ void push_next(const u64* table, const float* src, u64 n, int rank, int size) {
  float* dst = reinterpret_cast<float*>(table[(rank + 1) % size]);
  for (u64 i = pkit::thread_index(); i < n; i += pkit::thread_count()) dst[i] = src[i];
}
