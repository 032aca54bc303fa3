#pragma once
// The mailbox discipline of a module actor: calls run one at a time, in the order they were
// forked. The actor drains the queue when nudged; a thread that waits for a queued call may drain
// up to it itself (holding the same run lock), so a module call never waits for a free scheduler
// thread and fork/wait on modules cannot deadlock. One nudge is in flight at a time: calls forked
// while the actor has not yet taken it send no message of their own. Each module name has
// its metrics (metrics::ActorMetrics): calls, errors, mailbox depth and the time calls run.
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "actors/observe/metrics.h"
#include "actors/task.h"

namespace troupe {

class ModuleQueue {
 public:
  // counted: whether its calls count in the actor metrics (a hosted remote actor counts its own).
  explicit ModuleQueue(std::string name, bool counted = true);
  ~ModuleQueue();
  const std::string& name() const { return name_; }

  // How the module's actor is nudged, and how it is stopped when the queue goes away.
  void set_notifier(std::function<void()> nudge, std::function<void()> stop);
  // Queues a call and nudges the actor, unless a nudge is still on its way.
  void submit(const detail::TaskPtr& task);
  // Runs the queued calls (what the module's actor does when nudged).
  void run_queued();
  // Runs queued calls in order until `task` is done (what a waiting thread does).
  void run_until(detail::TaskBase* task);

 private:
  detail::TaskPtr pop();
  void run_call(const detail::TaskPtr& task);  // runs it, counting it in the module's metrics
  void nudge();                                // unless one is on its way

  std::string name_;
  std::function<void()> nudge_;
  std::function<void()> stop_;
  std::mutex queue_mutex_;
  std::deque<detail::TaskPtr> queue_;
  std::mutex run_mutex_;             // held while a call of this module runs
  std::atomic<bool> nudged_{false};  // a nudge is on its way: the actor drains once it takes it
  std::atomic<bool> missed_{false};  // a nudge found the run lock taken (run_queued)
  std::unique_ptr<metrics::ActorMetrics> metrics_;  // null: not counted
};

}  // namespace troupe
