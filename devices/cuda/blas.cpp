// cuBLAS handles: one per troupe Stream (owned by it, with its workspace), else one per thread and
// device for the default stream.
#include "devices/cuda/blas.h"

#include <string>

namespace troupe::cuda {

namespace {

constexpr int kMaxDevices = 64;
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

// Made on first use by the stream's owner; destroyed with the stream (stream.h).
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
    Stream::Blas*& blas = stream->blas_;
    if (!blas) {
      DeviceGuard on(device);
      auto* made = new Stream::Blas;
      cublasStatus_t status = cublasCreate(&made->handle);
      if (status != CUBLAS_STATUS_SUCCESS) {
        delete made;
        check_blas(status, "cublasCreate", device);
      }
      // The workspace is the stream's own: cuBLAS would otherwise share one pool between streams.
      const cudaError_t err = cudaMalloc(&made->workspace, kWorkspaceBytes);
      if (err != cudaSuccess) {
        cublasDestroy(made->handle);
        delete made;
        check(err, "cudaMalloc (cuBLAS workspace)", device);
      }
      check_blas(cublasSetStream(made->handle, stream->handle()), "cublasSetStream", device);
      check_blas(cublasSetWorkspace(made->handle, made->workspace, kWorkspaceBytes), "cublasSetWorkspace", device);
      blas = made;
    }
    return blas->handle;
  }
  thread_local ThreadHandles handles;
  cublasHandle_t& h = handles.by_device[device];
  if (!h) check_blas(cublasCreate(&h), "cublasCreate", device);
  check_blas(cublasSetStream(h, current_stream(device)), "cublasSetStream", device);
  return h;
}

}  // namespace troupe::cuda
