#include <catch2/catch.hpp>
#include <atomic>
#include <thread>

#include "actors/fork.h"
#include "actors/kernel_budget.h"
#include "devices/threads.h"
#include "support/two_workers.h"

using namespace troupe;

namespace {

// Spins until `flag` reaches `value`; the tasks here meet so that they surely overlap.
void await(const std::atomic<int>& flag, int value) {
  while (flag.load() < value) std::this_thread::yield();
}

}  // namespace

TEST_CASE("the thread budget follows the tasks running at each kernel call", "[runtime][threads]") {
  two_workers();
  const int setting = intra_op_threads();  // nothing running: the setting (the cores by default)
  const int half = std::min(setting, std::max(1, hardware_cores() / 2));

  // Two tasks that overlap get half the cores each, whichever threads run them. This thread
  // first waits (on a trivial task) so that it no longer counts as forking alongside them.
  std::atomic<int> go{0}, arrived{0}, asked{0};
  auto meet = [&] {
    await(go, 1);
    arrived.fetch_add(1);
    await(arrived, 2);
    const int threads = intra_op_threads();
    asked.fetch_add(1);
    await(asked, 2);  // neither ends before both asked
    return threads;
  };
  auto a = fork(meet), b = fork(meet);
  wait(fork([] { return 0; }));
  go.store(1);
  CHECK(wait(a) == half);
  CHECK(wait(b) == half);

  // This thread forked and computes alongside its task: both count until it waits.
  std::atomic<int> step{0};
  auto alongside = fork([&] {
    await(step, 1);
    const int during = intra_op_threads();
    step.store(2);
    await(step, 3);
    return during;
  });
  step.store(1);
  await(step, 2);
  CHECK(intra_op_threads() == half);
  step.store(3);
  CHECK(wait(alongside) == half);
  CHECK(intra_op_threads() == setting);  // waited: nothing runs alongside any more
}

TEST_CASE("a graph node's kernel budget shares the cores within the process-wide setting", "[runtime][threads]") {
  const int global = global_intra_op_threads();
  {
    KernelBudget first(0, 8);  // 8 cores, one body firing: all of them, up to the process's setting
    CHECK(thread_intra_op_threads() == std::min(8, global));
    {
      KernelBudget second(0, 8);  // two firing: half each
      CHECK(thread_intra_op_threads() == std::max(1, std::min(8, global) / 2));
      KernelBudget fixed(3, 8);  // the runtime's fixed setting wins
      CHECK(thread_intra_op_threads() == 3);
    }
    CHECK(thread_intra_op_threads() == std::min(8, global));  // given back
  }
  set_intra_op_threads(1);  // as TROUPE_INTRA_OP_THREADS=1 sets it (ThreadSanitizer's runs)
  {
    KernelBudget capped(0, 8);
    CHECK(thread_intra_op_threads() == 1);
  }
  set_intra_op_threads(global);
  CHECK(thread_intra_op_threads() == 0);  // the thread's own setting cleared again
}
