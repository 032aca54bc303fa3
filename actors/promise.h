#pragma once
// Promise<T>: a Future completed by whoever holds the promise (a dataflow node, a network
// receive), not by running a task. Waiting on its future helps with other forked work.
//
//   Promise<Tensor> p;
//   Future<Tensor> f = p.future();
//   p.set_value(t);                  // from any thread; once
//   Tensor u = wait(f);
#include <memory>

#include "actors/future.h"

namespace troupe {

template <class T>
class Promise {
 public:
  Promise() : state_(std::make_shared<detail::ExternalResult<T>>()) {}

  // The one future of this promise; ValueError when asked twice.
  Future<T> future() {
    if (state_->future_taken.exchange(true)) throw ValueError("Promise::future: the future was already taken");
    return Future<T>(state_);
  }
  template <class... V>
  void set_value(V&&... value) {
    claim("set_value");
    state_->set_value(std::forward<V>(value)...);
  }
  void set_exception(std::exception_ptr error) {
    claim("set_exception");
    state_->set_exception(std::move(error));
  }
  bool fulfilled() const { return state_->fulfilled.load(); }

 private:
  void claim(const char* what) {
    if (state_->fulfilled.exchange(true)) throw ValueError(std::string("Promise::") + what + ": already fulfilled");
  }
  std::shared_ptr<detail::ExternalResult<T>> state_;  // shared: a Promise may be moved or copied
};

}  // namespace troupe
