#pragma once
// Future<T>: the response to a fork. Move-only, like std::future; get() once.
//
//   Future<Tensor> f = fork(model, x);
//   Tensor y = wait(f);                          // or f.get(); rethrows the task's exception
//   std::vector<Tensor> ys = wait_all(futures);
#include <memory>
#include <vector>

#include "actors/task.h"
#include "devices/error.h"

namespace troupe {

template <class T>
class Future {
 public:
  Future() = default;
  explicit Future(std::shared_ptr<detail::TaskResult<T>> task) : task_(std::move(task)) {}
  Future(Future&&) noexcept = default;
  Future& operator=(Future&&) noexcept = default;
  Future(const Future&) = delete;
  Future& operator=(const Future&) = delete;

  bool valid() const { return task_ != nullptr; }
  // A call on a lane (a GPU actor's): waits until the call's work is queued, then returns the event
  // after it; done (empty) for other calls. Call before get().
  Event event() const {
    check("event");
    task_->wait();
    return task_->event();
  }
  bool ready() const { return task_ && task_->is_done(); }
  // Waits (running pending work meanwhile) without taking the value.
  void wait() const {
    check("wait");
    task_->wait();
  }
  // Waits, then returns the value or rethrows the task's exception; the future is then empty.
  T get() {
    check("get");
    task_->wait();
    auto task = std::move(task_);
    return task->take();
  }

 private:
  void check(const char* what) const {
    if (!task_) throw ValueError(std::string("Future::") + what + ": the future is empty (already retrieved?)");
  }
  std::shared_ptr<detail::TaskResult<T>> task_;
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
