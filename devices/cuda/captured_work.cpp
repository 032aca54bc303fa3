// CUDA graphs for CapturedWork (devices/captured_work.h): stream capture on the lane's stream,
// allocations served from an arena made before the capture, one cudaGraphLaunch per replay.
#include <algorithm>

#include "devices/captured_work.h"
#include "devices/cuda/cuda_util.h"

namespace troupe::cuda {

namespace {

// Sets this thread's allocation mode for a scope and puts the old one back.
class AllocationScope {
 public:
  explicit AllocationScope(ThreadAllocation mode) : saved_(thread_allocation()) { thread_allocation() = mode; }
  ~AllocationScope() { thread_allocation() = saved_; }
  AllocationScope(const AllocationScope&) = delete;
  AllocationScope& operator=(const AllocationScope&) = delete;

 private:
  ThreadAllocation saved_;
};

class CudaCapturedWork final : public CapturedWork {
 public:
  CudaCapturedWork(Lane& lane, size_t arena_bytes, const std::function<void()>& fn)
      : lane_(lane), device_(lane.device().index) {
    LaneGuard current(lane);  // its stream is this thread's current stream now
    DeviceGuard on(device_);
    const cudaStream_t stream = current_stream(device_);
    arena_.size = std::max<size_t>(arena_bytes, 256);
    // Stream-ordered, so the arena is freed after the last replay queued on the lane, without a wait.
    check(cudaMallocAsync(reinterpret_cast<void**>(&arena_.base), arena_.size, stream), "cudaMallocAsync (graph arena)",
          device_);
    add_arena(&arena_);
    cudaGraph_t graph = nullptr;
    std::vector<DeferredFree> deferred;
    try {
      check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture", device_);
      try {
        AllocationScope from_arena({.arena = &arena_, .deferred = &deferred, .meter = nullptr});
        fn();
      } catch (...) {
        cudaStreamEndCapture(stream, &graph);  // ends the capture; the partial graph is dropped
        if (graph) cudaGraphDestroy(graph);
        free_deferred(deferred);
        throw;
      }
      const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
      free_deferred(deferred);  // on the lane's stream, after the capture
      check(ended, "cudaStreamEndCapture", device_);
      check(cudaGraphInstantiateWithFlags(&exec_, graph, 0), "cudaGraphInstantiate", device_);
      cudaGraphDestroy(graph);
    } catch (...) {
      release();
      throw;
    }
  }

  ~CudaCapturedWork() override { release(); }

  void replay() override {
    LaneGuard current(lane_);
    check(cudaGraphLaunch(exec_, current_stream(device_)), "cudaGraphLaunch", device_);
  }

  size_t arena_bytes() const override { return arena_.size; }

 private:
  void release() {
    if (exec_) cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
    if (!arena_.base) return;
    remove_arena(&arena_);
    LaneGuard current(lane_);
    cudaFreeAsync(arena_.base, current_stream(device_));
    arena_.base = nullptr;
  }

  Lane& lane_;
  int device_;
  AllocationArena arena_;
  cudaGraphExec_t exec_ = nullptr;
};

size_t measure(int device, const std::function<void()>& fn) {
  size_t bytes = 0;
  AllocationScope counted({.arena = nullptr, .deferred = nullptr, .meter = &bytes});
  fn();
  return bytes;
}

const bool registered = [] {
  detail::register_capture_hooks({
      .capture = [](Lane& lane, size_t arena_bytes, const std::function<void()>& fn) -> std::unique_ptr<CapturedWork> {
        return std::make_unique<CudaCapturedWork>(lane, arena_bytes, fn);
      },
      .measure = measure,
  });
  return true;
}();

}  // namespace

}  // namespace troupe::cuda
