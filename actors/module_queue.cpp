#include "actors/module_queue.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "devices/error.h"

namespace troupe {

namespace {
// Module queues whose run lock this thread holds: waiting on one of them again would deadlock.
thread_local std::vector<ModuleQueue*> held_by_this_thread;

struct HeldScope {
  explicit HeldScope(ModuleQueue* q) { held_by_this_thread.push_back(q); }
  ~HeldScope() { held_by_this_thread.pop_back(); }
};
}  // namespace

ModuleQueue::ModuleQueue(std::string name, bool counted)
    : name_(std::move(name)), metrics_(counted ? std::make_unique<metrics::ActorMetrics>(name_) : nullptr) {}

ModuleQueue::~ModuleQueue() {
  if (stop_) stop_();
}

void ModuleQueue::set_notifier(std::function<void()> nudge, std::function<void()> stop) {
  nudge_ = std::move(nudge);
  stop_ = std::move(stop);
}

void ModuleQueue::submit(const detail::TaskPtr& task) {
  {
    std::lock_guard lock(queue_mutex_);
    queue_.push_back(task);
    queued_.fetch_add(1, std::memory_order_release);
    if (metrics_) metrics_->mailbox.add(1);  // under the lock, so the depth never reads below 0
  }
  nudge();
}

// A message per call would cost each call a send, and the actor's thread a turn (and frees on
// another thread) for calls a waiting thread has usually run already.
void ModuleQueue::nudge() {
  if (!nudged_.exchange(true)) nudge_();
}

detail::TaskPtr ModuleQueue::pop() {
  std::lock_guard lock(queue_mutex_);
  if (queue_.empty()) return nullptr;
  auto task = std::move(queue_.front());
  queue_.pop_front();
  queued_.fetch_sub(1, std::memory_order_release);
  if (metrics_) metrics_->mailbox.add(-1);
  return task;
}

void ModuleQueue::run_queued() {
  nudged_.store(false);  // calls queued from now on nudge again
  // While a waiting thread runs the queue (run_until), the nudge does not block its scheduler
  // thread on the run lock, which would cost the waiter a wake-up as it lets go: it leaves a mark
  // instead, and the waiter nudges again if calls are still queued then. The mark is set before
  // the lock is tried and read after the waiter let go, so none is missed.
  missed_.store(true);
  std::unique_lock run(run_mutex_, std::try_to_lock);
  if (!run.owns_lock()) return;
  missed_.store(false);
  HeldScope held(this);
  while (auto task = pop()) run_call(task);
}

void ModuleQueue::run_call(const detail::TaskPtr& task) {
  if (!metrics_ || !metrics::enabled()) {
    task->try_run();
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  if (!task->try_run()) return;
  metrics_->seconds.observe(metrics::seconds_since(start));
  metrics_->calls.add();
  if (task->error_) metrics_->errors.add();
}

void ModuleQueue::run_until(detail::TaskBase* task) {
  if (std::find(held_by_this_thread.begin(), held_by_this_thread.end(), this) != held_by_this_thread.end())
    throw ValueError("wait: a call of module '" + name_ +
                     "' waits for a later call of the same module, which can only run after it (deadlock)");
  {
    std::lock_guard run(run_mutex_);
    HeldScope held(this);
    // Under the run lock a call is either still queued or done, so this loop ends with it done.
    while (!task->is_done()) {
      auto next = pop();
      if (!next) break;
      run_call(next);
    }
  }
  nudge_if_missed();
}

// The calls a nudge left while this thread held the run lock.
void ModuleQueue::nudge_if_missed() {
  if (!missed_.exchange(false)) return;
  if (queued_.load(std::memory_order_acquire) > 0) nudge();
}

bool ModuleQueue::begin_inline() {
  // Calls this thread queued earlier are still ahead; a call of this module forking it again runs
  // after the one running (try_lock on a mutex this thread holds is undefined).
  if (queued_.load(std::memory_order_acquire) > 0) return false;
  if (std::find(held_by_this_thread.begin(), held_by_this_thread.end(), this) != held_by_this_thread.end())
    return false;
  if (!run_mutex_.try_lock()) return false;
  // Queued between the look above and the lock: those run first, through the actor.
  if (queued_.load(std::memory_order_acquire) > 0) {
    run_mutex_.unlock();
    nudge_if_missed();
    return false;
  }
  held_by_this_thread.push_back(this);
  return true;
}

void ModuleQueue::end_inline(std::chrono::steady_clock::time_point start, bool failed) {
  held_by_this_thread.pop_back();
  run_mutex_.unlock();
  if (start != std::chrono::steady_clock::time_point{}) {
    metrics_->seconds.observe(metrics::seconds_since(start));
    metrics_->calls.add();
    if (failed) metrics_->errors.add();
  }
  nudge_if_missed();
}

}  // namespace troupe
