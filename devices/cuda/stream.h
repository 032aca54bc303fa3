#pragma once
// CUDA streams and the per-thread current stream. Every kernel, copy and allocation Troupe makes
// on cuda:N goes on the calling thread's current stream for N, so work of different threads (GPU
// actors) overlaps, and nothing waits for the device except reading values back to the host
// (Tensor::to(cpu) waits for the current stream only).
//
//   cuda::Stream stream(0);                    // a new non-blocking stream on cuda:0
//   {
//     cuda::StreamGuard on(stream);            // this thread's work on cuda:0 now goes there
//     Tensor y = relu(matmul(x, w));           // queued, returns at once
//     stream.then([] { /* runs on a CUDA thread once y is computed; no CUDA calls here */ });
//   }
//   other.wait(stream);                         // other's later work starts after stream's so far
//
// Without a guard a thread uses the device's default stream, one per device, shared by all threads.
#include <functional>
#include <mutex>

// The CUDA runtime's own spelling of a stream handle, so this header needs no CUDA headers.
struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;
struct cublasContext;
typedef struct cublasContext* cublasHandle_t;
struct cudnnContext;
typedef struct cudnnContext* cudnnHandle_t;

namespace troupe::cuda {

struct StreamBlocks;

// Usable CUDA devices (0 when there is no GPU or driver).
int device_count();

class Stream {
 public:
  explicit Stream(int device = 0);  // DeviceError when the device does not exist
  ~Stream();                        // waits for the stream's work first
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t handle() const { return handle_; }
  int device() const { return device_; }
  // Blocks the host until all work queued so far is done, then throws the error a kernel found in
  // its data on this device, if any (an IndexError: cuda/kernel_errors.h).
  void synchronize() const;
  bool done() const;         // whether all work queued so far is done (does not block)
  // Later work on this stream waits (on the device) for the work queued on `other` so far.
  void wait(cudaStream_t other) const;
  void wait(const Stream& other) const { wait(other.handle()); }
  // Runs fn on a CUDA-owned host thread once all work queued so far is done. fn must not call
  // CUDA; further work on this stream waits for fn to return.
  void then(std::function<void()> fn) const;
  // The stream's share of the device's memory pool (cuda_backend.cpp): its kept blocks, its lock.
  StreamBlocks* blocks() const { return blocks_; }

 private:
  friend cublasHandle_t blas_handle(int device);  // the stream's own cuBLAS handle (cuda/blas.h)
  struct Blas;
  void destroy_blas();
  friend cudnnHandle_t dnn_handle(int device);  // the stream's own cuDNN handle (cuda/dnn.h)
  struct Dnn;

  cudaStream_t handle_ = nullptr;
  int device_ = 0;
  StreamBlocks* blocks_ = nullptr;  // outlives the stream while blocks allocated on it live
  // Made on first use by a kernel on this stream, once: threads that share the stream may get there
  // together.
  mutable std::once_flag blas_made_, dnn_made_;
  mutable Blas* blas_ = nullptr;
  mutable Dnn* dnn_ = nullptr;  // likewise, for cuDNN
  // Set with dnn_ by cuda/dnn.cpp, so that a build without cuDNN has nothing to link here.
  mutable void (*destroy_dnn_)(Dnn*) = nullptr;
  friend struct StepLoopsOf;  // the lstm's step-loop graphs and their buffers on this stream (cuda/lstm.cu)
  struct StepLoops;
  mutable std::once_flag step_loops_made_;
  mutable StepLoops* step_loops_ = nullptr;
  mutable void (*destroy_step_loops_)(StepLoops*) = nullptr;  // set with step_loops_, likewise
};

// The stream of threads without a StreamGuard for `device` (one per device, shared).
cudaStream_t default_stream(int device = 0);
// The stream the calling thread queues work on for `device`.
cudaStream_t current_stream(int device = 0);
// The Stream object behind it while a StreamGuard is in scope; nullptr on the default stream.
const Stream* current_stream_object(int device = 0);
// Blocks until the calling thread's current stream for `device` has finished its work; then as
// Stream::synchronize.
void synchronize(int device = 0);

// Makes stream (nullptr: the default stream) the calling thread's current one for device, and
// returns the one before; what StreamGuard does, for code that cannot keep a guard object.
const Stream* swap_current_stream(int device, const Stream* stream);

// Makes a stream the calling thread's current stream for its device while in scope.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  const Stream* previous_;
};

}  // namespace troupe::cuda
