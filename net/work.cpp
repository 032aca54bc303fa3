#include "net/work.h"

#include <string>

#include "devices/error.h"

namespace troupe::net {

namespace {

class CompletionWork final : public Work::Impl {
 public:
  CompletionWork(std::shared_ptr<detail::Completion> completion, std::string what)
      : completion_(std::move(completion)), what_(std::move(what)) {}
  bool is_completed() override { return completion_->is_done(); }
  void wait(Deadline deadline) override {
    if (!completion_->wait_until(deadline)) throw TimeoutError(what_ + ": not completed within the timeout");
  }

 private:
  std::shared_ptr<detail::Completion> completion_;
  std::string what_;
};

}  // namespace

Work Work::from_completion(std::shared_ptr<detail::Completion> completion, std::chrono::milliseconds timeout,
                           const char* what) {
  auto impl = std::make_shared<CompletionWork>(std::move(completion), what);
  impl->default_timeout = timeout;
  return Work(std::move(impl));
}

bool Work::is_completed() const {
  if (!impl_) throw ValueError("Work::is_completed: empty work handle");
  return impl_->is_completed();
}

void Work::wait() const {
  if (!impl_) throw ValueError("Work::wait: empty work handle");
  impl_->wait(deadline_after(impl_->default_timeout));
}

void Work::wait(std::chrono::milliseconds timeout) const {
  if (!impl_) throw ValueError("Work::wait: empty work handle");
  impl_->wait(deadline_after(timeout));
}

int Work::source() const { return impl_ ? impl_->source() : -1; }

}  // namespace troupe::net
