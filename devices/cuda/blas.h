#pragma once
// Internal to the CUDA kernels: the cuBLAS handle for the calling thread's current stream.
//
//   check_blas(cublasSgemm(blas_handle(device), ...), "cublasSgemm", device);
//
// A GPU actor's lane owns its stream and that stream's handle and workspace (made on first use,
// kept with the stream), so two actors never share a handle and a handle never follows a thread
// to another actor's stream. Work on a device's default stream uses one handle per thread.
#include <cublas_v2.h>

#include "devices/cuda/cuda_util.h"

namespace troupe::cuda {

// DeviceError "cuda:N: <call>: <status name> (<status text>)" unless status is success.
void check_blas(cublasStatus_t status, const char* call, int device);
// The handle bound to the calling thread's current stream for device.
cublasHandle_t blas_handle(int device);

}  // namespace troupe::cuda
