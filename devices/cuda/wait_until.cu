// A stream held on the device until a word of mapped pinned memory, written by a host thread, reaches
// a value: how a CUDA lane waits for a host lane's event without blocking CUDA's host-function thread
// (cuda/host_waits.h).
#include "devices/cuda/cuda_util.h"

namespace troupe::cuda {

namespace {

__global__ void wait_until(const volatile uint64_t* released, uint64_t value) {
  while (*released < value) __nanosleep(2000);  // one thread, asleep between looks: the SM stays free
}

}  // namespace

void queue_wait_until(const uint64_t* released, uint64_t value, cudaStream_t stream, int device) {
  wait_until<<<1, 1, 0, stream>>>(released, value);
  check_launch("wait_until (a host lane's event)", device);
}

}  // namespace troupe::cuda
