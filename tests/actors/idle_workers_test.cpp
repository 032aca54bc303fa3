// What idle scheduler threads do (RuntimeOptions::idle_workers): CAF's polling, or sleeping until
// woken for work, chosen from the ranks on this host or TROUPE_IDLE_WORKERS. Each case builds its
// own runtimes, one at a time, and never the shared two_workers() one.
#include <catch2/catch.hpp>
#include <caf/all.hpp>
#include <functional>
#include <string>

#include "actors/fork.h"
#include "actors/runtime.h"
#include "devices/error.h"
#include "devices/threads.h"
#include "support/scoped_env.h"

using namespace troupe;

namespace {

// CAF's moderate polling phase, in attempts (500 unless the runtime turned it off).
size_t moderate_polls(Runtime& runtime) {
  return caf::get_or(runtime.system().config(), "work-stealing.moderate-poll-attempts", size_t{500});
}

// Nested forks that need both workers' queues: fib(12) by a fork per call.
int fib(int n) {
  if (n < 2) return n;
  auto left = fork(fib, n - 1);
  const int right = fib(n - 2);
  return wait(left) + right;
}

}  // namespace

TEST_CASE("idle workers: sleep turns CAF's polling off, and nested forks still finish", "[runtime][idle]") {
  Runtime runtime({.workers = 2, .idle_workers = IdleWorkers::sleep});
  CHECK(runtime.options().idle_workers == IdleWorkers::sleep);
  CHECK(moderate_polls(runtime) == 0);
  CHECK(runtime.describe().find("idle workers sleep") != std::string::npos);
  CHECK(fib(12) == 144);
}

TEST_CASE("idle workers: poll keeps CAF's polling", "[runtime][idle]") {
  Runtime runtime({.workers = 2, .idle_workers = IdleWorkers::poll});
  CHECK(moderate_polls(runtime) == 500);
  CHECK(runtime.describe().find("sleep") == std::string::npos);
  CHECK(fib(12) == 144);
}

TEST_CASE("idle workers: automatic sleeps when the ranks on this host outnumber its cores", "[runtime][idle]") {
  const ScopedEnv no_override("TROUPE_IDLE_WORKERS", "");
  {
    const ScopedEnv ranks("LOCAL_WORLD_SIZE", std::to_string(hardware_cores() + 1));
    Runtime runtime({.workers = 2});
    CHECK(runtime.options().idle_workers == IdleWorkers::sleep);
  }
  {
    const ScopedEnv ranks("LOCAL_WORLD_SIZE", std::to_string(hardware_cores()));
    Runtime runtime({.workers = 2});
    CHECK(runtime.options().idle_workers == IdleWorkers::poll);
  }
}

TEST_CASE("idle workers: automatic counts the ranks a transport noted on this machine", "[runtime][idle]") {
  const ScopedEnv no_override("TROUPE_IDLE_WORKERS", "");
  const ScopedEnv one_here("LOCAL_WORLD_SIZE", "1");  // one per network namespace, many on the machine
  struct Forget {
    ~Forget() { note_ranks_on_machine(1); }
  } forget;
  note_ranks_on_machine(hardware_cores() + 1);
  {
    Runtime runtime({.workers = 2});
    CHECK(runtime.options().idle_workers == IdleWorkers::sleep);
    CHECK(moderate_polls(runtime) == 0);
  }
  note_ranks_on_machine(hardware_cores());
  Runtime runtime({.workers = 2});
  CHECK(runtime.options().idle_workers == IdleWorkers::poll);
}

TEST_CASE("idle workers: TROUPE_IDLE_WORKERS overrides automatic, and a bad value is a ValueError naming it",
          "[runtime][idle]") {
  const ScopedEnv ranks("LOCAL_WORLD_SIZE", "1");
  {
    const ScopedEnv asked("TROUPE_IDLE_WORKERS", "sleep");
    Runtime runtime({.workers = 2});
    CHECK(runtime.options().idle_workers == IdleWorkers::sleep);
  }
  {
    const ScopedEnv asked("TROUPE_IDLE_WORKERS", "nap");
    CHECK_THROWS_WITH(Runtime({.workers = 2}), Catch::Contains("TROUPE_IDLE_WORKERS=nap") && Catch::Contains("poll or sleep"));
  }
}
