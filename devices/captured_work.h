#pragma once
// CapturedWork: the kernels some host code queues on a CUDA lane, captured once into a CUDA graph
// and then replayed with one launch. What it saves is the host's launch cost per kernel (a few
// microseconds each), which dominates small batches: a 24-layer encoder at batch 1 is ~300 kernels.
//
//   auto lane = Lane::make(Device::cuda(0));
//   LaneGuard on(*lane);  // the ordinary run goes on the lane too: it makes the lane's library
//                         // handles (cuBLAS, cuDNN), which a capture cannot make
//   Tensor x = Tensor::zeros({8, 512}, DType::f32, lane->device()), y;   // the static input, the output
//   size_t bytes = measure_device_allocations(lane->device(), [&] { y = model(x); });  // an ordinary run
//   auto work = CapturedWork::capture(*lane, bytes, [&] { y = model(x); });           // nothing runs
//   for (const Tensor& next : batches) {
//     copy_into(x, next);  // into x's own bytes, on the lane
//     work->replay();      // y's bytes hold the new result once the lane gets there
//     consume(y.to(Device::cpu()));
//   }
//
// Memory the captured code allocates comes from an arena the capture owns, sized by a first
// ordinary run of the same code (measure_device_allocations), and kept until the CapturedWork goes:
// tensors made during the capture (y) stay valid, and each replay rewrites them; what the capture
// drops that was made before it (y of the ordinary run) is freed once the capture ends. The captured
// code must queue the same work every time (no host reads of device values, no shape that depends
// on values); shapes that change need a new capture. Tensors it reads that were made before it (x)
// must outlive the CapturedWork. DeviceError on a host lane or without a GPU.
#include <cstddef>
#include <functional>
#include <memory>

#include "devices/lane.h"
#include "devices/tensor.h"

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

// dst's own bytes (contiguous; no copy-on-write, so every tensor that shares them, a captured
// graph too, sees the new values) become src's, from any device, queued on the calling thread's
// current lane or stream. ShapeError when dtype or shape differ.
void copy_into(Tensor& dst, const Tensor& src);

namespace detail {
struct CaptureHooks {
  std::unique_ptr<CapturedWork> (*capture)(Lane& lane, size_t arena_bytes, const std::function<void()>& fn) = nullptr;
  size_t (*measure)(int device, const std::function<void()>& fn) = nullptr;
};
void register_capture_hooks(CaptureHooks hooks);
}  // namespace detail

}  // namespace troupe
