#include "actors/runtime.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <caf/all.hpp>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "actors/handoff.h"
#include "actors/observe/metrics.h"
#include "actors/observe/metrics_server.h"
#include "actors/module_actor.h"
#include "actors/observe/profiler.h"
#include "actors/task.h"
#include "devices/error.h"
#include "devices/threads.h"

namespace troupe::detail {
// What a fork request carries: the task itself (local actors only, never serialised).
struct TaskRequest {
  TaskPtr task;
};
// What tells a module's actor that calls are queued (ModuleQueue).
struct QueueNudge {};
}  // namespace troupe::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::detail::TaskRequest)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::detail::QueueNudge)

namespace troupe {

namespace {

// Recently forked plain tasks, newest first: what a waiting thread runs while the task it waits
// for is running elsewhere. Bounded: an overwritten hint costs nothing, the request is still in
// its worker's mailbox.
class HelpQueue {
 public:
  void push(const detail::TaskPtr& task) {
    std::lock_guard lock(mutex_);
    slots_[head_++ % slots_.size()] = task;
    if (size_ < slots_.size()) ++size_;
  }
  detail::TaskPtr pop() {
    std::lock_guard lock(mutex_);
    while (size_ > 0) {
      --size_;
      auto task = std::move(slots_[--head_ % slots_.size()]);
      if (task && !task->is_done()) return task;
    }
    return nullptr;
  }

 private:
  std::mutex mutex_;
  std::array<detail::TaskPtr, 256> slots_;
  size_t head_ = 0, size_ = 0;
};

std::atomic<int> running_tasks{0};
std::atomic<uint64_t> next_task_id{1};
metrics::Counter& tasks_forked = metrics::counter("troupe_tasks_total", "Tasks forked (fork/wait and module calls)");

// The thread budget counts, besides running tasks, threads outside the runtime that forked and
// have not waited since: they presumably compute alongside their forks (the TorchScript fork/wait tutorial's BiFork runs
// one direction itself while the other is forked). Without them two 2-thread kernels shared 2
// cores and every OpenMP barrier waited for a descheduled thread.
std::atomic<int> forking_externals{0};
thread_local bool in_task = false;
thread_local detail::TaskBase* running_task = nullptr;
struct ForkingExternal {
  bool active = false;
  void start() {
    if (active || in_task) return;
    active = true;
    forking_externals.fetch_add(1, std::memory_order_relaxed);
  }
  void stop() {
    if (!active) return;
    active = false;
    forking_externals.fetch_sub(1, std::memory_order_relaxed);
  }
  ~ForkingExternal() { stop(); }
};
thread_local ForkingExternal forking_external;

// Installed as the intra-op share (devices/threads.h): asked on every kernel call, so a task's
// kernels follow the tasks running now, not those running when it started.
int adaptive_share() {
  const int runners = running_tasks.load(std::memory_order_relaxed) +
                      forking_externals.load(std::memory_order_relaxed) +
                      (in_task || forking_external.active ? 0 : 1);
  return std::max(1, hardware_cores() / std::max(1, runners));
}

// CAF's actor_system reads the destroying thread's thread_locals; at exit the main thread's are
// destroyed before static objects, so a `static Runtime` must not tear CAF down then.
thread_local bool thread_locals_gone = false;
struct ThreadLocalsSentinel {
  ~ThreadLocalsSentinel() { thread_locals_gone = true; }
};
thread_local ThreadLocalsSentinel thread_locals_sentinel;

// Written under current_mutex; read without it on the fork/wait path (every fork and task asks).
std::atomic<Runtime*> current_runtime{nullptr};
Runtime* fallback_runtime = nullptr;  // the default one, once built
std::mutex current_mutex;

std::atomic<int> ranks_on_machine{1};  // note_ranks_on_machine's

// IdleWorkers::automatic and TROUPE_IDLE_WORKERS resolved. Measured with 9 ranks of mesh_bench on
// 2 cores (AMD EPYC Zen 3 VM): every idle rank spent 12-18% of a core on polling; sleeping, a
// 4-byte remote call took 86-103 us instead of 158-257, a call to 64 mesh members 1.1-2.0 ms
// instead of 1.4-4.7. With 2 ranks on 2 cores it made no difference (26-35 us either way).
IdleWorkers resolve_idle_workers(IdleWorkers asked) {
  if (asked != IdleWorkers::automatic) return asked;
  if (const char* env = std::getenv("TROUPE_IDLE_WORKERS"); env && *env) {
    const std::string v = env;
    if (v == "poll") return IdleWorkers::poll;
    if (v == "sleep") return IdleWorkers::sleep;
    throw ValueError("Runtime: TROUPE_IDLE_WORKERS=" + v + ", expected poll or sleep");
  }
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  const long ranks_here = std::max(local ? std::strtol(local, nullptr, 10) : 1L, long{ranks_on_machine.load()});
  return ranks_here > hardware_cores() ? IdleWorkers::sleep : IdleWorkers::poll;
}

}  // namespace

struct Runtime::Impl {
  explicit Impl(RuntimeOptions opts) : options(opts) {
    if (options.workers <= 0) options.workers = hardware_cores();
    if (options.intra_op_threads < 0) throw ValueError("Runtime: intra_op_threads must be >= 0");
    config.set("scheduler.max-threads", static_cast<size_t>(options.workers));
    config.set("logger.verbosity", caf::atom("quiet"));
    options.idle_workers = resolve_idle_workers(options.idle_workers);
    if (options.idle_workers == IdleWorkers::sleep) config.set("work-stealing.moderate-poll-attempts", size_t{0});
    system = std::make_unique<caf::actor_system>(config);
    for (int i = 0; i < options.workers; ++i) {
      std::string lane = "worker " + std::to_string(i);
      // What the actor needs goes in as spawn arguments: CAF 0.17 dereferences a null argument
      // tuple when there are none (UBSan reports it).
      workers.push_back(system->spawn(
          [](std::string lane) -> caf::behavior {
            return {[lane](detail::TaskRequest& request) {
              detail::HandlerTurn turn;
              Profiler::set_thread_actor(lane);
              request.task->try_run();
            }};
          },
          std::move(lane)));
    }
  }
  ~Impl() {
    for (auto& w : workers) caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
    workers.clear();
  }

  RuntimeOptions options;
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  std::vector<caf::actor> workers;
  std::atomic<size_t> next_worker{0};
  HelpQueue help;
};

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>(options)) {
  (void)&thread_locals_sentinel;  // constructed now, so its destructor marks this thread's exit
  set_intra_op_share(adaptive_share);  // cores / 1 while nothing runs: as without it
  metrics::serve_from_env();
  Profiler::start_job_trace_from_env();
  std::lock_guard lock(current_mutex);
  if (current_runtime.load() && current_runtime.load() != fallback_runtime)
    throw ValueError("Runtime: another explicit Runtime is alive; one at a time");
  current_runtime = this;
}

Runtime::~Runtime() {
  {
    std::lock_guard lock(current_mutex);
    if (current_runtime.load() == this) current_runtime.store(nullptr);
  }
  // During static destruction the process is ending: leave the workers to the exit.
  if (thread_locals_gone) (void)impl_.release();
}

void note_ranks_on_machine(int ranks) { ranks_on_machine.store(std::max(ranks, 1)); }

Runtime& Runtime::current() {
  if (Runtime* now = current_runtime.load(std::memory_order_acquire)) return *now;
  // Built on first use and never destroyed: forks may happen during static destruction. Built
  // without current_mutex held: the constructor takes it (and makes the new runtime current).
  static Runtime* fallback = [] {
    auto* runtime = new Runtime();
    std::lock_guard lock(current_mutex);
    fallback_runtime = runtime;
    return runtime;
  }();
  std::lock_guard lock(current_mutex);
  Runtime* now = current_runtime.load();
  return now ? *now : *fallback;
}

caf::actor_system& Runtime::system() { return *impl_->system; }
int Runtime::workers() const { return impl_->options.workers; }
const RuntimeOptions& Runtime::options() const { return impl_->options; }

std::string Runtime::describe() const {
  const int intra = impl_->options.intra_op_threads;
  return std::to_string(workers()) + " worker actors on " + std::to_string(workers()) + " threads, intra-op " +
         (intra == 0 ? "adaptive (cores / running tasks)" : std::to_string(intra)) + ", " +
         std::to_string(hardware_cores()) + " cores" +
         (impl_->options.idle_workers == IdleWorkers::sleep ? ", idle workers sleep" : "");
}

namespace detail {

TaskBase::TaskBase(std::shared_ptr<ModuleQueue> queue)
    : id_(next_task_id.fetch_add(1, std::memory_order_relaxed)), queue_(std::move(queue)) {}

TaskBase::TaskBase(External)
    : state_(running), id_(next_task_id.fetch_add(1, std::memory_order_relaxed)) {}

void TaskBase::finish(std::exception_ptr error) {
  error_ = std::move(error);
  state_.store(done, std::memory_order_release);
  state_.notify_all();
}

TaskBase* TaskBase::running_on_this_thread() { return running_task; }

bool TaskBase::try_run() {
  uint32_t expected = pending;
  if (!state_.compare_exchange_strong(expected, running, std::memory_order_acq_rel)) return false;
  run_claimed();
  return true;
}

void TaskBase::run_claimed() {
  Runtime& rt = Runtime::current();
  running_tasks.fetch_add(1, std::memory_order_relaxed);
  const bool was_in_task = in_task;
  in_task = true;
  TaskBase* const outer = running_task;
  running_task = this;
  // Fixed: every kernel gets that many threads. Adaptive (0): adaptive_share() decides per kernel.
  const int previous = thread_intra_op_threads();
  set_thread_intra_op_threads(rt.options().intra_op_threads);
  {
    TaskSpan span(id_);
    try {
      execute();
    } catch (...) {
      error_ = std::current_exception();
    }
  }
  set_thread_intra_op_threads(previous);
  running_task = outer;
  in_task = was_in_task;
  running_tasks.fetch_sub(1, std::memory_order_relaxed);
  state_.store(done, std::memory_order_release);
  state_.notify_all();
}

void TaskBase::wait() {
  forking_external.stop();
  if (is_done()) return;
  if (queue_) {
    queue_->run_until(this);
    if (is_done()) return;
  } else if (try_run()) {
    return;
  }
  // Running on another thread: help with other pending work, then block. A task waiting here
  // computes nothing, so it leaves the thread budget meanwhile; what it helps with counts.
  const bool counted = in_task;
  if (counted) running_tasks.fetch_sub(1, std::memory_order_relaxed);
  auto& help = Runtime::current().impl().help;
  int idle_spins = 0;
  while (!is_done()) {
    if (auto other = help.pop()) {
      other->try_run();
      idle_spins = 0;
    } else if (help_complete()) {
      idle_spins = 0;
    } else if (++idle_spins < 64) {
      _mm_pause();
    } else {
      state_.wait(running, std::memory_order_acquire);
    }
  }
  if (counted) running_tasks.fetch_add(1, std::memory_order_relaxed);
}

void submit(const TaskPtr& task) {
  Runtime& rt = Runtime::current();
  forking_external.start();
  tasks_forked.add();
  Profiler::record_fork(task->id());
  if (ModuleQueue* queue = task->queue()) {
    queue->submit(task);
    return;
  }
  auto& impl = rt.impl();
  impl.help.push(task);
  const size_t w = impl.next_worker.fetch_add(1, std::memory_order_relaxed) % impl.workers.size();
  send_handoff(impl.workers[w], TaskRequest{task});
}

// The module's actor: each nudge runs the queued calls. It holds the queue weakly (the handles and
// the tasks hold it), so a module whose handles are gone stops its actor from ~ModuleQueue.
std::shared_ptr<ModuleQueue> spawn_module_actor(std::string name, bool counted) {
  auto& system = Runtime::current().system();
  auto queue = std::make_shared<ModuleQueue>(name, counted);
  auto actor = system.spawn(  // what it needs as spawn arguments: see Runtime::Impl
      [](std::string name, std::weak_ptr<ModuleQueue> weak) -> caf::behavior {
        return {[name, weak](QueueNudge&) {
          HandlerTurn turn;
          if (std::shared_ptr<ModuleQueue> queue = weak.lock()) {
            Profiler::set_thread_actor(name);
            queue->run_queued();
          }
        }};
      },
      std::move(name), std::weak_ptr<ModuleQueue>(queue));
  queue->set_notifier([actor] { send_handoff(actor, QueueNudge{}); },
                      [actor] { caf::anon_send_exit(actor, caf::exit_reason::user_shutdown); });
  return queue;
}

}  // namespace detail
}  // namespace troupe
