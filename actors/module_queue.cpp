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

void ModuleQueue::set_notifier(std::function<void(const detail::TaskPtr&)> send, std::function<void()> stop) {
  send_ = std::move(send);
  stop_ = std::move(stop);
}

void ModuleQueue::submit(const detail::TaskPtr& task) {
  {
    std::lock_guard lock(queue_mutex_);
    queue_.push_back(task);
    if (metrics_) metrics_->mailbox.add(1);  // under the lock, so the depth never reads below 0
  }
  send_(task);
}

detail::TaskPtr ModuleQueue::pop() {
  std::lock_guard lock(queue_mutex_);
  if (queue_.empty()) return nullptr;
  auto task = std::move(queue_.front());
  queue_.pop_front();
  if (metrics_) metrics_->mailbox.add(-1);
  return task;
}

void ModuleQueue::run_next() {
  // While a waiting thread runs the queue (run_until), a request does not block its scheduler
  // thread on the run lock, which would cost the waiter a wake-up as it lets go: it leaves a count
  // instead, and the waiter sends a request again if calls are still queued then. The count is
  // raised before the lock is tried and read after the waiter let go, so none is missed.
  owed_.fetch_add(1);
  std::unique_lock run(run_mutex_, std::try_to_lock);
  if (!run.owns_lock()) return;
  HeldScope held(this);
  for (int owed = owed_.exchange(0); owed > 0; --owed) {
    auto task = pop();
    if (!task) break;
    run_call(task);
  }
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
  if (owed_.load() == 0) return;
  detail::TaskPtr next;
  {
    std::lock_guard lock(queue_mutex_);
    if (!queue_.empty()) next = queue_.front();
  }
  if (next) send_(next);  // the requests left while this thread ran the queue
}

}  // namespace troupe
