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
  set_thread_intra_op_threads(fixed > 0 ? fixed : std::max(1, cores / running));
}

KernelBudget::~KernelBudget() {
  set_thread_intra_op_threads(previous_);
  firing.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace troupe
