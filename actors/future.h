#pragma once
// Future<T>: the response to a fork. Move-only, like std::future; get() once.
//
//   Future<Tensor> f = fork(model, x);
//   Tensor y = wait(f);                          // or f.get(); rethrows the task's exception
//   std::vector<Tensor> ys = wait_all(futures);
#include <memory>
#include <optional>
#include <vector>

#include "actors/task.h"
#include "devices/error.h"

namespace troupe {

template <class T>
class Future {
 public:
  Future() = default;
  explicit Future(std::shared_ptr<detail::TaskResult<T>> task) : task_(std::move(task)) {}
  // A call already run on the forking thread (fork.h): done, with no task behind it.
  explicit Future(detail::Outcome<T> outcome) : outcome_(std::move(outcome)) {}
  // A moved-from future is empty, as with std::future (a moved-from optional would stay engaged).
  Future(Future&& other) noexcept : task_(std::move(other.task_)), outcome_(std::move(other.outcome_)) {
    other.outcome_.reset();
  }
  Future& operator=(Future&& other) noexcept {
    task_ = std::move(other.task_);
    outcome_ = std::move(other.outcome_);
    other.outcome_.reset();
    return *this;
  }
  Future(const Future&) = delete;
  Future& operator=(const Future&) = delete;

  bool valid() const { return task_ != nullptr || outcome_.has_value(); }
  // A call on a lane (a GPU actor's): waits until the call's work is queued, then returns the event
  // after it; done (empty) for other calls. Call before get().
  Event event() const {
    check("event");
    if (outcome_) return outcome_->event;
    task_->wait();
    return task_->event();
  }
  bool ready() const { return outcome_.has_value() || (task_ && task_->is_done()); }
  // Waits (running pending work meanwhile) without taking the value.
  void wait() const {
    check("wait");
    if (task_) task_->wait();
  }
  // Waits, then returns the value or rethrows the task's exception; the future is then empty.
  T get() {
    check("get");
    if (outcome_) {
      detail::Outcome<T> outcome = std::move(*outcome_);
      outcome_.reset();
      if (outcome.error) std::rethrow_exception(outcome.error);
      if constexpr (!std::is_void_v<T>) return std::move(*outcome.value);
      else return;
    }
    task_->wait();
    auto task = std::move(task_);
    return task->take();
  }

 private:
  void check(const char* what) const {
    if (!valid()) throw ValueError(std::string("Future::") + what + ": the future is empty (already retrieved?)");
  }
  std::shared_ptr<detail::TaskResult<T>> task_;
  std::optional<detail::Outcome<T>> outcome_;  // set instead of task_ for a call run inline
};

template <class T>
T wait(Future<T>& future) {
  return future.get();
}

template <class T>
T wait(Future<T>&& future) {
  return future.get();
}

// Waits for every future in order; the first exception is rethrown after all have finished,
// so no task is left running against state the caller is about to free.
template <class T>
auto wait_all(std::vector<Future<T>>& futures) {
  for (auto& f : futures) f.wait();
  if constexpr (std::is_void_v<T>) {
    for (auto& f : futures) f.get();
  } else {
    std::vector<T> out;
    out.reserve(futures.size());
    for (auto& f : futures) out.push_back(f.get());
    return out;
  }
}

}  // namespace troupe
