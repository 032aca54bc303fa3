#pragma once
// TROUPE_HOST_DEVICE marks an inline function that both the C++ kernels and the cuda kernels call:
// __host__ __device__ when nvcc compiles it, nothing otherwise.
#if defined(__CUDACC__)
#define TROUPE_HOST_DEVICE __host__ __device__
#else
#define TROUPE_HOST_DEVICE
#endif
