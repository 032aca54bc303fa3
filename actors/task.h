#pragma once
// A forked piece of work and the slot its result lands in: the state behind Future<T>.
// Internal to the runtime; users see fork(), Future and wait().
//
// A task is pending until one thread claims it (compare-and-swap to running), then done.
// Whoever claims it runs it: the worker actor its request was sent to, or a thread that waits
// for it first. That rule is what keeps nested fork/wait from deadlocking.
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "devices/event.h"

namespace troupe {

class ModuleQueue;

namespace detail {

class TaskBase {
 public:
  enum State : uint32_t { pending = 0, running = 1, done = 2 };

  explicit TaskBase(std::shared_ptr<ModuleQueue> queue = nullptr);
  // A task completed from outside (a Promise): it starts claimed, so no waiter tries to run it.
  struct External {};
  explicit TaskBase(External);
  virtual ~TaskBase() = default;

  // Claims and runs the task on this thread; false when someone else already claimed it.
  bool try_run();
  // Returns once the task is done, running it or other pending work meanwhile.
  void wait();
  bool is_done() const { return state_.load(std::memory_order_acquire) == done; }
  uint64_t id() const { return id_; }
  ModuleQueue* queue() const { return queue_.get(); }
  void rethrow_if_failed() const {
    if (error_) std::rethrow_exception(error_);
  }
  // A call on a lane: the event after the work it queued (done, empty, for other tasks). Set by the
  // task itself while it runs, read once it is done.
  const Event& event() const { return event_; }
  void set_event(Event event) { event_ = std::move(event); }
  // The task this thread is running now, or nullptr.
  static TaskBase* running_on_this_thread();

 protected:
  virtual void execute() = 0;  // throws: the exception is kept and rethrown by wait()
  // What a waiter may do instead of sleeping to complete a task finished from outside: a remote
  // reply's waiter receives it itself, saving a thread hand-off. False: nothing to do now.
  virtual bool help_complete() { return false; }
  // Marks an External task done (with an error, or not) and wakes its waiters.
  void finish(std::exception_ptr error);

 private:
  void run_claimed();
  friend class troupe::ModuleQueue;

  std::atomic<uint32_t> state_{pending};
  uint64_t id_;
  std::shared_ptr<ModuleQueue> queue_;  // set for module calls: they run in that order
  std::exception_ptr error_;
  Event event_;
};

using TaskPtr = std::shared_ptr<TaskBase>;

template <class T>
class TaskResult : public TaskBase {
 public:
  using TaskBase::TaskBase;
  // Moves the value out; the caller has waited.
  T take() {
    rethrow_if_failed();
    return std::move(*value_);
  }

 protected:
  std::optional<T> value_;
};

template <>
class TaskResult<void> : public TaskBase {
 public:
  using TaskBase::TaskBase;
  void take() { rethrow_if_failed(); }
};

// The state behind a Promise: completed by set_value/set_exception, never run.
template <class T>
class ExternalResult final : public TaskResult<T> {
 public:
  ExternalResult() : TaskResult<T>(TaskBase::External{}) {}
  template <class... V>
  void set_value(V&&... v) {
    if constexpr (!std::is_void_v<T>) this->value_.emplace(std::forward<V>(v)...);
    this->finish(nullptr);
  }
  void set_exception(std::exception_ptr e) { this->finish(std::move(e)); }

  std::atomic<bool> future_taken{false};
  std::atomic<bool> fulfilled{false};

 private:
  void execute() override {}
};

template <class T, class Fn>
class Task final : public TaskResult<T> {
 public:
  Task(Fn fn, std::shared_ptr<ModuleQueue> queue) : TaskResult<T>(std::move(queue)), fn_(std::move(fn)) {}

 private:
  void execute() override {
    if constexpr (std::is_void_v<T>) {
      fn_();
    } else {
      this->value_.emplace(fn_());
    }
  }
  Fn fn_;
};

// A call that ran on the forking thread itself (a lane actor's call, run inline while the actor
// was idle: fork.h): its value or error and its event, held by the Future, with no task behind it.
template <class T>
struct Outcome {
  std::optional<T> value;
  std::exception_ptr error;
  Event event;
};
template <>
struct Outcome<void> {
  std::exception_ptr error;
  Event event;
};

// Sends the task as a request to a worker actor (or its module's actor) and remembers it
// for threads that wait and may help.
void submit(const TaskPtr& task);

}  // namespace detail
}  // namespace troupe
