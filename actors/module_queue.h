#pragma once
// The mailbox discipline of a module actor: calls run one at a time, in the order they were
// forked. The actor drains the queue when nudged; a thread that waits for a queued call may drain
// up to it itself (holding the same run lock), so a module call never waits for a free scheduler
// thread and fork/wait on modules cannot deadlock. One nudge is in flight at a time: calls forked
// while the actor has not yet taken it send no message of their own. Each module name has
// its metrics (metrics::ActorMetrics): calls, errors, mailbox depth and the time calls run.
#include <atomic>
#include <chrono>
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

  // Runs call() on the calling thread at once, holding the run lock, when the module is idle: no
  // call queued, none running, and this thread not inside one of its calls (that one would have to
  // finish first). False, without running it, otherwise: the caller queues it. A call forked while
  // this one runs finds the run lock taken and queues behind it; the nudge it sends finds the lock
  // taken too and leaves a mark, and the inline caller nudges again as it lets go (as run_until
  // does), so the queued call runs next, in order. try_lock never blocks, so an inline call adds no
  // wait that could deadlock. call() reports its own errors; failed says whether it did.
  template <class Call>
  bool try_run_inline(Call&& call) {
    if (!begin_inline()) return false;
    const auto start = metrics_ && metrics::enabled() ? std::chrono::steady_clock::now()
                                                       : std::chrono::steady_clock::time_point{};
    bool failed = true;
    struct End {
      ModuleQueue& queue;
      const std::chrono::steady_clock::time_point& start;
      const bool& failed;
      ~End() { queue.end_inline(start, failed); }
    } end{*this, start, failed};
    failed = !call();
    return true;
  }

 private:
  detail::TaskPtr pop();
  void run_call(const detail::TaskPtr& task);  // runs it, counting it in the module's metrics
  void nudge();                                // unless one is on its way
  bool begin_inline();                         // takes the run lock of an idle module
  // Lets it go, counts the call (start: unset when not counted) and nudges for calls queued meanwhile.
  void end_inline(std::chrono::steady_clock::time_point start, bool failed);
  void nudge_if_missed();

  std::string name_;
  std::function<void()> nudge_;
  std::function<void()> stop_;
  std::mutex queue_mutex_;
  std::deque<detail::TaskPtr> queue_;
  std::atomic<size_t> queued_{0};    // queue_.size(), read without the lock by begin_inline
  std::mutex run_mutex_;             // held while a call of this module runs
  std::atomic<bool> nudged_{false};  // a nudge is on its way: the actor drains once it takes it
  std::atomic<bool> missed_{false};  // a nudge found the run lock taken (run_queued)
  std::unique_ptr<metrics::ActorMetrics> metrics_;  // null: not counted
};

}  // namespace troupe
