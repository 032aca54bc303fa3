#include "actors/module_queue.h"

#include <algorithm>
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
  }
  send_(task);
}

detail::TaskPtr ModuleQueue::pop() {
  std::lock_guard lock(queue_mutex_);
  if (queue_.empty()) return nullptr;
  auto task = std::move(queue_.front());
  queue_.pop_front();
  return task;
}

void ModuleQueue::run_next() {
  std::lock_guard run(run_mutex_);
  HeldScope held(this);
  if (auto task = pop()) task->try_run();
}

void ModuleQueue::run_until(detail::TaskBase* task) {
  if (std::find(held_by_this_thread.begin(), held_by_this_thread.end(), this) != held_by_this_thread.end())
    throw ValueError("wait: a call of module '" + name_ +
                     "' waits for a later call of the same module, which can only run after it (deadlock)");
  std::lock_guard run(run_mutex_);
  HeldScope held(this);
  // Under the run lock a call is either still queued or done, so this loop ends with it done.
  while (!task->is_done()) {
    auto next = pop();
    if (!next) break;
    next->try_run();
  }
}

}  // namespace troupe
