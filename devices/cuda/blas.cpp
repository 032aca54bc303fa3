// cuBLAS handles: one per troupe Stream (owned by it, with its workspace), else one per thread and
// device for the default stream.
#include "devices/cuda/blas.h"

#include <string>

namespace troupe::cuda {

namespace {

// cuBLAS's own recommendation for Hopper: 32 MiB lets its split-K and stream-K kernels run.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

struct ThreadHandles {
  cublasHandle_t by_device[kMaxDevices] = {};
  ~ThreadHandles() {
    for (cublasHandle_t h : by_device)
      if (h) cublasDestroy(h);
  }
};

}  // namespace

void check_blas(cublasStatus_t status, const char* call, int device) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw DeviceError("cuda:" + std::to_string(device) + ": " + call + ": " + cublasGetStatusName(status) + " (" +
                      cublasGetStatusString(status) + ")");
}

// Made on first use on the stream; destroyed with the stream (stream.h).
struct Stream::Blas {
  cublasHandle_t handle = nullptr;
  void* workspace = nullptr;
};

void Stream::destroy_blas() {
  if (!blas_) return;
  if (blas_->handle) cublasDestroy(blas_->handle);
  if (blas_->workspace) cudaFree(blas_->workspace);
  delete blas_;
  blas_ = nullptr;
}

cublasHandle_t blas_handle(int device) {
  if (const Stream* stream = current_stream_object(device)) {
    // A failure leaves the flag unset: the next kernel on the stream tries again.
    std::call_once(stream->blas_made_, [&] {
      DeviceGuard on(device);
      Stream::Blas made;
      try {
        check_blas(cublasCreate(&made.handle), "cublasCreate", device);
        // The workspace is the stream's own: cuBLAS would otherwise share one pool between streams.
        check(cudaMalloc(&made.workspace, kWorkspaceBytes), "cudaMalloc (cuBLAS workspace)", device);
        check_blas(cublasSetStream(made.handle, stream->handle()), "cublasSetStream", device);
        check_blas(cublasSetWorkspace(made.handle, made.workspace, kWorkspaceBytes), "cublasSetWorkspace", device);
      } catch (...) {
        if (made.handle) cublasDestroy(made.handle);
        if (made.workspace) cudaFree(made.workspace);
        throw;
      }
      stream->blas_ = new Stream::Blas(made);
    });
    return stream->blas_->handle;
  }
  thread_local ThreadHandles handles;
  cublasHandle_t& h = handles.by_device[device];
  if (!h) check_blas(cublasCreate(&h), "cublasCreate", device);
  check_blas(cublasSetStream(h, current_stream(device)), "cublasSetStream", device);
  return h;
}

}  // namespace troupe::cuda
