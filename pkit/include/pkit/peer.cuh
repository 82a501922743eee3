// Peer pointer tables: every GPU of a team holds, in its own memory, the addresses of one symmetric
// allocation on all team members (valid in this GPU's address space, peer access enabled by pkit.Team).
#pragma once
#include "common.cuh"

namespace pkit {

template <typename T>
struct PeerTable {
  const u64* bases;  // bases[r]: address of rank r's allocation, as seen from this GPU
  int rank;          // this GPU's rank in the team
  int size;          // team size

  __device__ __forceinline__ T* operator[](int r) const { return reinterpret_cast<T*>(bases[r]); }
  __device__ __forceinline__ T* local() const { return (*this)[rank]; }
  // The rank `offset` steps away around the ring (offset may be negative).
  __device__ __forceinline__ int ring(int offset) const { return ((rank + offset) % size + size) % size; }
};

}  // namespace pkit
