#pragma once
// fork/wait: TorchScript's torch.jit.fork and torch.jit.wait as C++ on actors.
//
//   Tensor foo(const Tensor& x) { return neg(x); }
//   std::vector<Future<Tensor>> fs;
//   for (int i = 0; i < 100; ++i) fs.push_back(fork(foo, x));   // returns at once
//   Tensor total = sum(stack(wait_all(fs)));                      // -100 for x = 1
//
// fn may be a free function, a lambda, a member function pointer (with the object next), or
// a ModuleActor (its operator(), or the member function passed next, runs in the module's actor;
// an idle actor that owns a lane runs it on the forking thread, in the same order: see fork_module).
// Arguments are copied into the task (tensors share their bytes, which no one can change:
// see devices/tensor.h). Works from any thread, inside forked tasks (nested), and a task's
// exception is rethrown by wait().
#include <functional>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "actors/future.h"
#include "actors/lane_call.h"
#include "actors/module_actor.h"
#include "actors/task.h"

namespace troupe {

template <class Fn, class... Args>
  requires(!std::is_same_v<std::decay_t<Fn>, std::shared_ptr<Lane>>)
auto fork(Fn&& fn, Args&&... args) {
  using R = std::invoke_result_t<std::decay_t<Fn>&, std::decay_t<Args>&...>;
  auto call = [fn = std::forward<Fn>(fn), tuple = std::make_tuple(std::forward<Args>(args)...)]() mutable -> R {
    return std::apply([&](auto&... a) -> R { return std::invoke(fn, a...); }, tuple);
  };
  auto task = std::make_shared<detail::Task<R, decltype(call)>>(std::move(call), nullptr);
  detail::submit(task);
  return Future<R>(std::move(task));
}

namespace detail {

// A module call as a task: queued in the module's actor, run after the calls forked before it.
template <class R, class M, class Tuple, class Apply>
Future<R> fork_queued(ModuleActor<M>& module, Tuple tuple, Apply apply) {
  auto call = [object = module.shared_object(), lane = module.shared_lane(), tuple = std::move(tuple),
               apply]() mutable -> R { return run_on_lane<R>(lane.get(), [&]() -> R { return apply(*object, tuple); }, tuple); };
  auto task = std::make_shared<Task<R, decltype(call)>>(std::move(call), module.queue());
  submit(task);
  return Future<R>(std::move(task));
}

// A module call. An actor that owns a lane runs it on the forking thread when it is idle
// (ModuleQueue::try_run_inline keeps its calls one at a time and in order): a GPU actor's call only
// queues kernels, so running it here saves the task, the message and the hand-off between threads.
// A busy actor queues it as a task. Either way its error is rethrown by wait().
template <class R, class M, class Tuple, class Apply>
Future<R> fork_module(ModuleActor<M>& module, Tuple tuple, Apply apply) {
  if (Lane* lane = module.lane()) {
    Outcome<R> outcome;
    const bool ran = module.queue()->try_run_inline([&] {
      auto call = [&]() -> R { return apply(*module, tuple); };
      try {
        if constexpr (std::is_void_v<R>)
          run_on_lane<R>(lane, call, tuple, &outcome.event);
        else
          outcome.value.emplace(run_on_lane<R>(lane, call, tuple, &outcome.event));
        return true;
      } catch (...) {
        outcome.error = std::current_exception();
        return false;
      }
    });
    if (ran) return Future<R>(std::move(outcome));
  }
  return fork_queued<R>(module, std::move(tuple), apply);
}

}  // namespace detail

// A call of a module: run in the module's actor after the calls forked before it.
template <class M, class... Args>
  requires std::is_invocable_v<M&, std::decay_t<Args>&...>
auto fork(ModuleActor<M>& module, Args&&... args) {
  using R = std::invoke_result_t<M&, std::decay_t<Args>&...>;
  return detail::fork_module<R>(module, std::make_tuple(std::forward<Args>(args)...), [](M& object, auto& tuple) -> R {
    return std::apply([&](auto&... a) -> R { return object(a...); }, tuple);
  });
}

// A call of one of a module's member functions, in the module's actor: fork(m, &M::step, x).
template <class M, class Method, class... Args>
  requires std::is_member_function_pointer_v<Method>
auto fork(ModuleActor<M>& module, Method method, Args&&... args) {
  using R = std::invoke_result_t<Method, M&, std::decay_t<Args>&...>;
  return detail::fork_module<R>(module, std::make_tuple(std::forward<Args>(args)...),
                                [method](M& object, auto& tuple) -> R {
                                  return std::apply([&](auto&... a) -> R { return std::invoke(method, object, a...); },
                                                    tuple);
                                });
}

// A task on a lane: runs on a worker with the lane current (a GPU lane: its kernels go on the
// lane's stream), after the lane's work that wrote its tensor arguments; the Future completes once
// the work is queued and carries the event after it. Tasks forked onto one lane queue in the order
// they run, which forks do not fix: use a module actor for a fixed order.
template <class Fn, class... Args>
auto fork(const std::shared_ptr<Lane>& lane, Fn&& fn, Args&&... args) {
  using R = std::invoke_result_t<std::decay_t<Fn>&, std::decay_t<Args>&...>;
  auto call = [lane, fn = std::forward<Fn>(fn), tuple = std::make_tuple(std::forward<Args>(args)...)]() mutable -> R {
    return detail::run_on_lane<R>(
        lane.get(), [&]() -> R { return std::apply([&](auto&... a) -> R { return std::invoke(fn, a...); }, tuple); },
        tuple);
  };
  auto task = std::make_shared<detail::Task<R, decltype(call)>>(std::move(call), nullptr);
  detail::submit(task);
  return Future<R>(std::move(task));
}

}  // namespace troupe
