#pragma once
// Work: the handle of a non-blocking operation (isend, irecv, async collectives).
//
//   Work w = group->irecv(t, /*src=*/0);
//   ... compute ...
//   w.wait();                      // fills t; rethrows PeerLostError, TimeoutError, ShapeError...
//   bool done = w.is_completed();  // never blocks
//
// Every wait has a deadline: wait() uses the group's timeout, wait(ms) the given one. A wait that
// times out throws TimeoutError and cancels the operation (a cancelled receive consumes nothing).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>

#include "net/errors.h"

namespace troupe::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// Timeouts saturate at ten years, so "forever" stays a valid clock value.
inline Deadline deadline_after(std::chrono::milliseconds timeout) {
  constexpr std::chrono::milliseconds kForever = std::chrono::hours(24 * 365 * 10);
  return Clock::now() + std::clamp(timeout, std::chrono::milliseconds(0), kForever);
}

namespace detail {

// Done-or-failed flag shared between an operation and its waiters; any thread may finish it.
class Completion {
 public:
  void finish(std::exception_ptr error = nullptr) {
    {
      std::lock_guard lock(mutex_);
      if (done_) return;
      done_ = true;
      error_ = std::move(error);
    }
    cv_.notify_all();
  }
  bool is_done() const {
    std::lock_guard lock(mutex_);
    return done_;
  }
  // False when the deadline passed first; rethrows the operation's error.
  bool wait_until(Deadline deadline) {
    std::unique_lock lock(mutex_);
    if (!cv_.wait_until(lock, deadline, [&] { return done_; })) return false;
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace detail

class Work {
 public:
  // What an operation implements to be waited on.
  struct Impl {
    virtual ~Impl() = default;
    virtual bool is_completed() = 0;
    // Waits until done (then rethrows the operation's error) or throws TimeoutError at the deadline.
    virtual void wait(Deadline deadline) = 0;
    virtual int source() const { return -1; }
    std::chrono::milliseconds default_timeout{300000};
  };

  Work() = default;
  explicit Work(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  // A handle over a Completion that someone else finishes (async collectives use this).
  static Work from_completion(std::shared_ptr<detail::Completion> completion, std::chrono::milliseconds timeout,
                              const char* what);

  bool valid() const { return impl_ != nullptr; }
  bool is_completed() const;
  void wait() const;
  void wait(std::chrono::milliseconds timeout) const;
  // For a receive: the source rank (in the group's numbering) once completed; -1 otherwise.
  int source() const;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace troupe::net
