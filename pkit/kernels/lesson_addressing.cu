// Lesson step 1 (pkit.lesson.check_addressing), unified addressing: with peer access on (pkit.Team), every
// rank's buffer has one address that every GPU of the team can use, so a peer's memory is read with a plain load.
#include <pkit/common.cuh>

using pkit::u64;

// out[q * n + i] = element i of rank q's buffer, for every rank q. table[q] is the address of rank q's buffer
// (SymmetricArray.table): this GPU's own memory for q == rank, the peer's over NVLink otherwise.
extern "C" __global__ void gather_pull(const u64* table, float* out, u64 n, int size) {
  for (u64 i = pkit::thread_index(); i < n; i += pkit::thread_count())
    for (int q = 0; q < size; ++q) out[q * n + i] = reinterpret_cast<const float*>(table[q])[i];
}
