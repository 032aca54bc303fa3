#pragma once
// CapturedWork: the kernels some host code queues on a CUDA lane, captured once into a CUDA graph
// and then replayed with one launch. What it saves is the host's launch cost per kernel (a few
// microseconds each), which dominates small batches: a 24-layer encoder at batch 1 is ~300 kernels.
//
//   size_t bytes = measure_device_allocations(gpu, [&] { y = model(x_static); });   // an ordinary run
//   auto work = CapturedWork::capture(*lane, bytes, [&] { y = model(x_static); });  // nothing runs
//   for (...) {
//     x_static <- next input (a copy into its bytes, on the lane);
//     work->replay();                    // y's bytes hold the new result once the lane gets there
//   }
//
// Memory the captured code allocates comes from an arena the capture owns, sized by a first
// ordinary run of the same code (measure_device_allocations), and kept until the CapturedWork goes:
// tensors made during the capture (y) stay valid, and each replay rewrites them. The captured
// code must queue the same work every time (no host reads of device values, no shape that depends
// on values); shapes that change need a new capture. DeviceError on a host lane or without a GPU.
#include <cstddef>
#include <functional>
#include <memory>

#include "devices/lane.h"

namespace troupe {

class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  virtual void replay() = 0;  // queues the whole graph on the lane it was captured on
  virtual size_t arena_bytes() const = 0;

  static std::unique_ptr<CapturedWork> capture(Lane& lane, size_t arena_bytes, const std::function<void()>& fn);
};

// Bytes fn allocates on device while it runs on this thread (every allocation counted, none
// reused): the arena a capture of the same code needs.
size_t measure_device_allocations(Device device, const std::function<void()>& fn);

namespace detail {
struct CaptureHooks {
  std::unique_ptr<CapturedWork> (*capture)(Lane& lane, size_t arena_bytes, const std::function<void()>& fn) = nullptr;
  size_t (*measure)(int device, const std::function<void()>& fn) = nullptr;
};
void register_capture_hooks(CaptureHooks hooks);
}  // namespace detail

}  // namespace troupe
