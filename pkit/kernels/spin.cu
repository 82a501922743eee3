// Stream holders used by pkit.bench: a kernel of known duration, and one that waits for the host.
#include <pkit/spin.cuh>

// One thread busy-waits `ns` nanoseconds.
extern "C" __global__ void spin_ns(unsigned long long ns) { pkit::spin_for(ns); }

// One thread waits until the host sets *flag (pinned, mapped memory) to 1; traps after the pkit timeout.
extern "C" __global__ void spin_until_released(const unsigned int* flag) {
  pkit::wait_until(flag, 1u, PKIT_SITE);
}
