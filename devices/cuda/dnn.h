#pragma once
// Internal to the CUDA kernels: the cuDNN handle for the calling thread's current stream, and
// cuDNN's status as a DeviceError. Built only when CMake found cuDNN (TROUPE_HAVE_CUDNN).
//
//   check_dnn(cudnnConvolutionForward(dnn_handle(device), ...), "cudnnConvolutionForward", device);
//
// Like the cuBLAS handles (cuda/blas.h): a GPU actor's stream owns its handle, made on first use
// and destroyed with the stream; work on a device's default stream uses one handle per thread.
#include <cudnn.h>

#include "devices/cuda/cuda_util.h"

namespace troupe::cuda {

// DeviceError "cuda:N: <call>: <status name>" unless status is success.
void check_dnn(cudnnStatus_t status, const char* call, int device);
// The handle bound to the calling thread's current stream for device.
cudnnHandle_t dnn_handle(int device);

}  // namespace troupe::cuda
