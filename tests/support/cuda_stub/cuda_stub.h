#pragma once
// What the CUDA-runtime stub (cuda_stub.cpp) counts, read by a benchmark that finds it preloaded:
//
//   auto* counts = reinterpret_cast<const CudaStubCounts* (*)()>(dlsym(RTLD_DEFAULT, "troupe_cuda_stub_counts"));
//   if (counts) { uint64_t launches = counts()->launches; ... }   // null: the real runtime is loaded
//
// Counters are totals over all threads since the process started; a benchmark takes differences.
#include <atomic>
#include <cstdint>

struct CudaStubCounts {
  std::atomic<uint64_t> calls{0};             // every stubbed runtime call
  std::atomic<uint64_t> launches{0};          // kernel launches
  std::atomic<uint64_t> get_device{0};        // cudaGetDevice
  std::atomic<uint64_t> set_device{0};        // cudaSetDevice
  std::atomic<uint64_t> events_recorded{0};   // cudaEventRecord
  std::atomic<uint64_t> stream_waits{0};      // cudaStreamWaitEvent
  std::atomic<uint64_t> queries{0};           // cudaStreamQuery, cudaEventQuery
  std::atomic<uint64_t> pool_allocations{0};  // cudaMallocAsync
  std::atomic<uint64_t> pool_frees{0};        // cudaFreeAsync
  std::atomic<uint64_t> mutex_locks{0};       // pthread_mutex_lock and _trylock, from any library
  std::atomic<uint64_t> rwlock_locks{0};      // pthread_rwlock_rdlock and _wrlock (std::shared_mutex)
};
