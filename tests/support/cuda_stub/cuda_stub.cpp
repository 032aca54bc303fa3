// A stand-in for the CUDA runtime, for measuring the host side of GPU code on a machine without a
// GPU: preloaded ahead of libcudart.so, it answers the calls Troupe's device path makes as if one
// device were present and idle, does no device work, and counts the calls (cuda_stub.h).
//
//   LD_PRELOAD=build/lib/libtroupe_cuda_stub.so build/bin/lane_bench --device cuda
//
// Device memory is host memory here, so copies are real and kernels compute nothing: values read
// back are not results. It also counts pthread mutex locks (forwarded to libc), which is how the
// benchmark counts the mutexes on a call's path. Built only when asked (a test support target),
// never linked into Troupe.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>

#include <cstdlib>
#include <cstring>

#include "cuda_stub.h"

namespace {

CudaStubCounts counts;

// Distinct non-null handles for streams, events and kernels: nothing dereferences them.
std::atomic<uintptr_t> next_handle{0x1000};
template <class T>
T fresh_handle() {
  return reinterpret_cast<T>(next_handle.fetch_add(16, std::memory_order_relaxed));
}

cudaError_t counted() {
  counts.calls.fetch_add(1, std::memory_order_relaxed);
  return cudaSuccess;
}

thread_local int current_device = 0;

using MutexFn = int (*)(pthread_mutex_t*);
MutexFn next_symbol(const char* name) { return reinterpret_cast<MutexFn>(dlsym(RTLD_NEXT, name)); }

}  // namespace

extern "C" {

const CudaStubCounts* troupe_cuda_stub_counts() { return &counts; }

int pthread_mutex_lock(pthread_mutex_t* m) {
  static const MutexFn next = next_symbol("pthread_mutex_lock");
  counts.mutex_locks.fetch_add(1, std::memory_order_relaxed);
  return next(m);
}
int pthread_mutex_trylock(pthread_mutex_t* m) {
  static const MutexFn next = next_symbol("pthread_mutex_trylock");
  counts.mutex_locks.fetch_add(1, std::memory_order_relaxed);
  return next(m);
}

using RwlockFn = int (*)(pthread_rwlock_t*);
int pthread_rwlock_rdlock(pthread_rwlock_t* l) {
  static const auto next = reinterpret_cast<RwlockFn>(dlsym(RTLD_NEXT, "pthread_rwlock_rdlock"));
  counts.rwlock_locks.fetch_add(1, std::memory_order_relaxed);
  return next(l);
}
int pthread_rwlock_wrlock(pthread_rwlock_t* l) {
  static const auto next = reinterpret_cast<RwlockFn>(dlsym(RTLD_NEXT, "pthread_rwlock_wrlock"));
  counts.rwlock_locks.fetch_add(1, std::memory_order_relaxed);
  return next(l);
}

// Devices, errors and versions.
cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return counted();
}
cudaError_t cudaGetDevice(int* device) {
  counts.get_device.fetch_add(1, std::memory_order_relaxed);
  *device = current_device;
  return counted();
}
cudaError_t cudaSetDevice(int device) {
  counts.set_device.fetch_add(1, std::memory_order_relaxed);
  current_device = device;
  return counted();
}
cudaError_t cudaGetLastError() { return counted(); }
cudaError_t cudaPeekAtLastError() { return counted(); }
const char* cudaGetErrorString(cudaError_t) { return "stubbed CUDA runtime"; }
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = CUDART_VERSION;
  return counted();
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = CUDART_VERSION;
  return counted();
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  std::memset(p, 0, sizeof(*p));
  std::strcpy(p->name, "stubbed CUDA runtime (no device)");
  p->major = 9;
  p->multiProcessorCount = 132;
  p->totalGlobalMem = size_t(80) << 30;
  return counted();
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr, int) {
  *value = 0;
  return counted();
}
cudaError_t cudaDeviceSynchronize() { return counted(); }
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  *free = *total = size_t(80) << 30;
  return counted();
}

// Streams and events: always idle, always done.
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = fresh_handle<cudaStream_t>();
  return counted();
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return counted(); }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return counted(); }
cudaError_t cudaStreamQuery(cudaStream_t) {
  counts.queries.fetch_add(1, std::memory_order_relaxed);
  return counted();
}
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) {
  counts.stream_waits.fetch_add(1, std::memory_order_relaxed);
  return counted();
}
cudaError_t cudaLaunchHostFunc(cudaStream_t, cudaHostFn_t fn, void* data) {
  fn(data);  // the stream is idle: its work so far is done
  return counted();
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = fresh_handle<cudaEvent_t>();
  return counted();
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t) { return counted(); }
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) {
  counts.events_recorded.fetch_add(1, std::memory_order_relaxed);
  return counted();
}
cudaError_t cudaEventQuery(cudaEvent_t) {
  counts.queries.fetch_add(1, std::memory_order_relaxed);
  return counted();
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return counted(); }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) {
  *ms = 0;
  return counted();
}

// Memory: host memory stands in for the device's.
cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
  return counted();
}
cudaError_t cudaFree(void* p) {
  std::free(p);
  return counted();
}
cudaError_t cudaMallocAsync(void** p, size_t n, cudaStream_t) {
  counts.pool_allocations.fetch_add(1, std::memory_order_relaxed);
  return cudaMalloc(p, n);
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t) {
  counts.pool_frees.fetch_add(1, std::memory_order_relaxed);
  return cudaFree(p);
}
cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) {
  *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
  std::memset(*p, 0, n);
  return counted();
}
cudaError_t cudaFreeHost(void* p) { return cudaFree(p); }
cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned) {
  *device = host;
  return counted();
}
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int) {
  *pool = fresh_handle<cudaMemPool_t>();
  return counted();
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*) { return counted(); }
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t, cudaMemPoolAttr, void* value) {
  *static_cast<uint64_t*>(value) = 0;
  return counted();
}
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t, size_t) { return counted(); }
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind, cudaStream_t) {
  std::memcpy(dst, src, n);
  return counted();
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind) {
  std::memcpy(dst, src, n);
  return counted();
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t) {
  std::memset(p, value, n);
  return counted();
}

// Kernels: registered and launched as nothing.
void** __cudaRegisterFatBinary(void*) {
  static void* handle = nullptr;
  return &handle;
}
void __cudaRegisterFatBinaryEnd(void**) {}
void __cudaUnregisterFatBinary(void**) {}
void __cudaRegisterFunction(void**, const char*, char*, const char*, int, uint3*, uint3*, dim3*, dim3*, int*) {}
void __cudaRegisterVar(void**, char*, char*, const char*, int, size_t, int, int) {}
unsigned __cudaPushCallConfiguration(dim3, dim3, size_t, struct CUstream_st*) { return 0; }
cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* shared, void* stream) {
  *grid = dim3();
  *block = dim3();
  *shared = 0;
  *static_cast<cudaStream_t*>(stream) = nullptr;
  return cudaSuccess;
}
cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void*) {
  *kernel = fresh_handle<cudaKernel_t>();
  return cudaSuccess;
}
cudaError_t __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t) {
  counts.launches.fetch_add(1, std::memory_order_relaxed);
  return counted();
}
cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t) {
  counts.launches.fetch_add(1, std::memory_order_relaxed);
  return counted();
}

}  // extern "C"
