#pragma once
// The mailbox discipline of a module actor: calls run one at a time, in the order they were
// forked. The actor drains the queue as its request messages arrive; a thread that waits for a
// queued call may drain up to it itself (holding the same run lock), so a module call never
// waits for a free scheduler thread and fork/wait on modules cannot deadlock.
#include <deque>
#include <functional>
#include <mutex>
#include <string>

#include "actors/task.h"

namespace troupe {

class ModuleQueue {
 public:
  explicit ModuleQueue(std::string name) : name_(std::move(name)) {}
  ~ModuleQueue();
  const std::string& name() const { return name_; }

  // How requests reach the module's actor, and how it is stopped when the queue goes away.
  void set_notifier(std::function<void(const detail::TaskPtr&)> send, std::function<void()> stop);
  // Queues a call and sends its request to the actor.
  void submit(const detail::TaskPtr& task);
  // Runs the oldest queued call, if any (what the module's actor does per request).
  void run_next();
  // Runs queued calls in order until `task` is done (what a waiting thread does).
  void run_until(detail::TaskBase* task);

 private:
  detail::TaskPtr pop();

  std::string name_;
  std::function<void(const detail::TaskPtr&)> send_;
  std::function<void()> stop_;
  std::mutex queue_mutex_;
  std::deque<detail::TaskPtr> queue_;
  std::mutex run_mutex_;  // held while a call of this module runs
};

}  // namespace troupe
