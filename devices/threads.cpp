#include "devices/threads.h"

#include <cblas.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "devices/error.h"

namespace troupe {

namespace {

int cores_from_affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  const int count = CPU_COUNT(&set);
  return count > 0 ? count : 1;
}

// TROUPE_INTRA_OP_THREADS, when set, replaces the core count as the default.
int default_threads() {
  const char* text = std::getenv("TROUPE_INTRA_OP_THREADS");
  if (!text || !*text) return hardware_cores();
  char* end = nullptr;
  const long n = std::strtol(text, &end, 10);
  if (*end != '\0' || n < 1 || n > 4096)
    throw ValueError(std::string("TROUPE_INTRA_OP_THREADS: expected a thread count >= 1, got '") + text + "'");
  return static_cast<int>(n);
}

std::atomic<int> global_threads{0};  // 0: not chosen yet (default on first read)
thread_local int thread_threads = 0;  // 0: follow the share, else the global setting
std::atomic<int (*)()> share_hook{nullptr};

// OpenMP's count lives in each calling thread; OpenBLAS (pthread build) has one count per process.
thread_local int applied_omp_threads = 0;
std::atomic<int> applied_blas_threads{0};

// OpenBLAS (pthread build) starts its workers as it loads, and each spins on sched_yield for about
// 0.1 s before it sleeps: a CPU taken from a rank that busy-polls on a small machine, in every
// process, BLAS or not. Stop them as this library loads; OpenBLAS starts them again at its first
// call that goes parallel. Weak: a BLAS without this export is left alone.
extern "C" void blas_thread_shutdown_(void) __attribute__((weak));
[[maybe_unused]] const bool openblas_workers_stopped = [] {
  if (blas_thread_shutdown_ && openblas_get_parallel() == 1) blas_thread_shutdown_();
  return true;
}();

}  // namespace

int hardware_cores() {
  static const int cores = cores_from_affinity();
  return cores;
}

int global_intra_op_threads() {
  int n = global_threads.load(std::memory_order_relaxed);
  if (n <= 0) {
    int expected = 0;
    global_threads.compare_exchange_strong(expected, default_threads(), std::memory_order_relaxed);
    n = global_threads.load(std::memory_order_relaxed);
  }
  return n;
}

int intra_op_threads() {
  if (thread_threads > 0) return thread_threads;
  int n = global_intra_op_threads();
  if (auto share = share_hook.load(std::memory_order_acquire)) n = std::min(n, std::max(1, share()));
  return n;
}

void set_intra_op_share(int (*share)()) { share_hook.store(share, std::memory_order_release); }

void set_intra_op_threads(int n) {
  if (n < 1) throw ValueError("set_intra_op_threads: expected n >= 1, got " + std::to_string(n));
  global_threads.store(n, std::memory_order_relaxed);
}

int thread_intra_op_threads() { return thread_threads; }

void set_thread_intra_op_threads(int n) {
  if (n < 0) throw ValueError("set_thread_intra_op_threads: expected n >= 0 (0 clears), got " + std::to_string(n));
  thread_threads = n;
}

void apply_intra_op_threads() {
  const int n = intra_op_threads();
  if (applied_omp_threads != n) {
    omp_set_num_threads(n);
    applied_omp_threads = n;
  }
  if (applied_blas_threads.exchange(n, std::memory_order_relaxed) != n) openblas_set_num_threads(n);
}

void name_this_thread(const char* name) {
  char kept[16] = {};
  std::strncpy(kept, name, sizeof kept - 1);
  ::pthread_setname_np(::pthread_self(), kept);
}

}  // namespace troupe
