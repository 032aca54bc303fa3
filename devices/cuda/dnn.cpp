// cuDNN handles: one per troupe Stream (owned by it), else one per thread and device for the
// default stream. Kernels take their workspace from the stream-ordered pool per call, so a handle
// needs none of its own.
#include "devices/cuda/dnn.h"

#include <string>

namespace troupe::cuda {

namespace {

struct ThreadHandles {
  cudnnHandle_t by_device[kMaxDevices] = {};
  ~ThreadHandles() {
    for (cudnnHandle_t h : by_device)
      if (h) cudnnDestroy(h);
  }
};

}  // namespace

void check_dnn(cudnnStatus_t status, const char* call, int device) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw DeviceError("cuda:" + std::to_string(device) + ": " + call + ": " + cudnnGetErrorString(status));
}

// Made on first use on the stream; destroyed with the stream (stream.h).
struct Stream::Dnn {
  cudnnHandle_t handle = nullptr;
  static void destroy(Dnn* dnn) {
    if (dnn->handle) cudnnDestroy(dnn->handle);
    delete dnn;
  }
};

cudnnHandle_t dnn_handle(int device) {
  if (const Stream* stream = current_stream_object(device)) {
    // A failure leaves the flag unset: the next kernel on the stream tries again.
    std::call_once(stream->dnn_made_, [&] {
      DeviceGuard on(device);
      cudnnHandle_t handle = nullptr;
      check_dnn(cudnnCreate(&handle), "cudnnCreate", device);
      const cudnnStatus_t status = cudnnSetStream(handle, stream->handle());
      if (status != CUDNN_STATUS_SUCCESS) {
        cudnnDestroy(handle);
        check_dnn(status, "cudnnSetStream", device);
      }
      stream->dnn_ = new Stream::Dnn{handle};
      stream->destroy_dnn_ = &Stream::Dnn::destroy;
    });
    return stream->dnn_->handle;
  }
  thread_local ThreadHandles handles;
  cudnnHandle_t& h = handles.by_device[device];
  if (!h) check_dnn(cudnnCreate(&h), "cudnnCreate", device);
  check_dnn(cudnnSetStream(h, current_stream(device)), "cudnnSetStream", device);
  return h;
}

}  // namespace troupe::cuda
