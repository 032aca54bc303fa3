#pragma once
// Errors a cuda kernel finds in the data (an index out of range) without the host waiting for it.
// Checking an index on the host would mean reading it back, a synchronisation per op; instead the
// kernel writes a zero in place of the bad element, and the first thread to find one records it in
// its device's error word, in mapped pinned host memory. The host looks at the word when it next
// waits for that device anyway, after a device-to-host copy (Tensor::to(cpu), item(), to_vector())
// and in cuda::synchronize() / Stream::synchronize(), and throws it there: the error surfaces at
// the first such wait after the kernel ran, on whichever thread waits on that device.
//
//   // in a kernel, given word = kernel_error_word(device) and op = "gather_nd" (the host's literal:
//   // a literal written in device code would be a device address the host cannot read)
//   if (i < 0 || i >= n) { report_index_error(word, op, i, n, dim, position); value = 0; }
//   ...
//   Tensor host = y.to(Device::cpu());   // IndexError "gather_nd: index 7 ... on cuda:0"
#include <cstdint>

namespace troupe::cuda {

// One per device. The first kernel thread to find an error claims the word (state 0 -> 1), fills it,
// then publishes it (state 2); later errors are dropped until the host has taken this one.
struct KernelError {
  unsigned int state;  // 0: clear, 1: being written, 2: written
  int dim;             // the dim the index addresses
  const char* op;      // a string literal of the host's, carried through the kernel as a value
  long long index;     // the offending index
  long long size;      // the size of that dim: valid indices are [0, size)
  long long position;  // where the index sits in its tensor (row-major, flat)
};

// The device's error word as the device addresses it, allocated on first use (unified addressing:
// the same pointer on the host).
KernelError* kernel_error_word(int device);

// Throws the device's pending kernel error, if any, as an IndexError naming the op, the index and
// the device, and clears it. Call it after the device's work so far is known to be done.
void raise_pending_kernel_error(int device);

#ifdef __CUDACC__
// Records an out-of-range index unless an earlier error is still pending.
__device__ inline void report_index_error(KernelError* word, const char* op, long long index, long long size, int dim,
                                          long long position) {
  if (atomicCAS(&word->state, 0u, 1u) != 0u) return;
  word->dim = dim;
  word->op = op;
  word->index = index;
  word->size = size;
  word->position = position;
  __threadfence_system();  // the fields land before the state says they are there
  atomicExch(&word->state, 2u);
}
#endif

}  // namespace troupe::cuda
