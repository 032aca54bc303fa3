#pragma once
// Internal to fork(): how a call runs as a lane's work (devices/lane.h). Before the call, the lane
// waits, on the device, for the work that wrote each tensor argument on another lane; after it, the
// lane's mark (Lane::mark: a CUDA event recorded only once another lane, a host wait or a free on
// another stream asks for it) marks the results' bytes ready and completes the call's Future. The
// calling thread never waits for the device.
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "actors/task.h"
#include "devices/lane.h"
#include "devices/tensor.h"

namespace troupe::detail {

// Calls f on every defined tensor held by a value: a Tensor, a value that may hold one
// (is_tensor()/tensor(), as a dataflow Value), and vectors, optionals, pairs and tuples of such;
// other values hold none.
template <class T, class F>
void for_each_tensor(const T& value, F&& f) {
  if constexpr (requires { value.is_tensor(); value.tensor(); }) {
    if (value.is_tensor() && value.tensor().defined()) f(value.tensor());
  }
}
template <class F>
void for_each_tensor(const Tensor& t, F&& f) {
  if (t.defined()) f(t);
}
template <class T, class F>
void for_each_tensor(const std::vector<T>& values, F&& f) {
  for (const T& v : values) for_each_tensor(v, f);
}
template <class T, class F>
void for_each_tensor(const std::optional<T>& value, F&& f) {
  if (value) for_each_tensor(*value, f);
}
template <class A, class B, class F>
void for_each_tensor(const std::pair<A, B>& value, F&& f) {
  for_each_tensor(value.first, f);
  for_each_tensor(value.second, f);
}
template <class... T, class F>
void for_each_tensor(const std::tuple<T...>& values, F&& f) {
  std::apply([&](const auto&... v) { (for_each_tensor(v, f), ...); }, values);
}

// Orders the lane after the device's default stream, where arguments written by no lane were
// written (or on the host): an argument written on another lane is waited for by its event. True
// when that stream had nothing left to wait for.
bool await_default_stream(Lane& lane);
// The event after the call's work: marks each result's bytes, and goes to *done, or else to the
// task running on this thread.
Event finish_call(Lane& lane, Event* done);

// done: where the event after the call goes (a call run inline); nullptr: to the running task.
template <class R, class Call, class Args>
R run_on_lane(Lane* lane, Call&& call, const Args& args, Event* done_out = nullptr) {
  if (!lane) return call();
  LaneGuard on(*lane);
  // Arguments written on the default stream and not yet seen complete, with their versions then.
  std::vector<std::pair<Storage*, uint64_t>> unsettled;
  for_each_tensor(args, [&](const Tensor& t) {
    if (!(t.device() == lane->device())) return;
    Event ready = t.storage()->ready();
    if (ready.valid())
      lane->wait(ready);  // their ops' inputs find it awaited (CudaLane::wait)
    else if (!lane->device().is_cpu() && !t.storage()->settled())
      unsettled.emplace_back(t.storage().get(), t.storage()->version());
  });
  if (!unsettled.empty() && await_default_stream(*lane))
    for (auto [storage, version] : unsettled) storage->mark_settled(version);
  // The arguments' bytes are not freed for reuse before this lane has read them.
  auto note_uses = [&](const Event& done) {
    for_each_tensor(args, [&](const Tensor& t) {
      if (t.device() == lane->device()) t.storage()->add_use(done);
    });
  };
  if constexpr (std::is_void_v<R>) {
    call();
    note_uses(finish_call(*lane, done_out));
  } else {
    R result = call();
    Event done = finish_call(*lane, done_out);
    note_uses(done);
    for_each_tensor(result, [&](const Tensor& t) { t.storage()->set_ready(done); });
    return result;
  }
}

}  // namespace troupe::detail
