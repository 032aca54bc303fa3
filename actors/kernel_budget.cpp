#include "actors/kernel_budget.h"

#include <algorithm>
#include <atomic>

#include "devices/threads.h"

namespace troupe {

namespace {

// Node bodies firing now, across executors.
std::atomic<int> firing{0};

}  // namespace

KernelBudget::KernelBudget(int fixed, int cores) : previous_(thread_intra_op_threads()) {
  const int running = firing.fetch_add(1, std::memory_order_relaxed) + 1;
  // A process-wide cap (TROUPE_INTRA_OP_THREADS: 1 under ThreadSanitizer) holds for node bodies too.
  set_thread_intra_op_threads(fixed > 0 ? fixed : std::max(1, std::min(cores, global_intra_op_threads()) / running));
}

KernelBudget::~KernelBudget() {
  set_thread_intra_op_threads(previous_);
  firing.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace troupe
