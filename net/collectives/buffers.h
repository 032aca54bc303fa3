#pragma once
// Result buffers an algorithm keeps from call to call (internal to net/collectives/), as Gloo's
// algorithms keep theirs. A tensor from take() is the caller's alone (writable without a copy,
// whoever holds it later); when its last view is dropped its memory comes back here, already paged
// in, for a later take(). Fresh memory costs a page fault per 4 KiB on first write: 16384 of them
// for a 64 MiB all_reduce.
//
//   Buffers buffers(count, DType::f32);    // once, with the algorithm
//   Tensor result = buffers.take();        // per call: count elements, contents undefined
#include <cstdint>
#include <memory>

#include "devices/tensor.h"

namespace troupe::net::collectives {

class Buffers {
 public:
  Buffers(int64_t count, DType dtype);
  ~Buffers();
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;

  Tensor take();
  // Blocks given back and not yet taken again (for the tests).
  size_t idle() const;

 private:
  struct Idle;  // shared with the tensors' deleters, which may outlive this object
  int64_t count_;
  DType dtype_;
  size_t bytes_;
  std::shared_ptr<Idle> idle_;
};

}  // namespace troupe::net::collectives
