#include "net/remote/endpoint.h"

#include <iostream>
#include <optional>

#include "actors/lane_call.h"
#include "actors/module_actor.h"
#include "actors/observe/profiler.h"
#include "net/remote/on_receipt.h"

namespace troupe::net {

using detail::error;
using detail::error_text;

namespace {

// A call of an actor spawned on a device: its kernels queue on the actor's lane, after the work
// that wrote its tensor arguments there; its result tensors are marked with the lane's event.
WireValue call_on_lane(troupe::Lane& lane, const ActorType::Method& method, void* object, const WireValue& arguments) {
  std::vector<Tensor> inputs;
  arguments.collect_tensors(inputs);
  WireValue result;
  std::vector<Tensor> outputs = troupe::detail::run_on_lane<std::vector<Tensor>>(&lane, [&] {
    result = method.call(object, arguments);
    std::vector<Tensor> made;
    result.collect_tensors(made);
    return made;
  }, inputs);
  return result;
}

}  // namespace

namespace detail {
thread_local ServeLoop* serve_loop_here = nullptr;

namespace {
std::vector<const ActorType*>& on_receipt_types() {
  static std::vector<const ActorType*> types;
  return types;
}
}  // namespace

void run_on_receipt(const ActorType& type) { on_receipt_types().push_back(&type); }

bool runs_on_receipt(const ActorType& type) {
  for (const ActorType* t : on_receipt_types())
    if (t == &type) return true;
  return false;
}
}  // namespace detail

std::shared_ptr<detail::Hosted> RemoteActors::Impl::find_hosted(uint64_t id) {
  std::lock_guard lock(mutex);
  auto it = hosted.find(id);
  return it == hosted.end() ? nullptr : it->second;
}

void RemoteActors::Impl::deliver(int source, CallFrame&& call) {
  std::shared_ptr<Hosted> actor = find_hosted(call.actor);
  if (!actor) {
    if (call.kind == CallKind::stop && call.request == 0) return;
    refuse(source, call.request,
           error<ValueError>("remote actor #" + std::to_string(call.actor) + " on rank " + std::to_string(rank) +
                             ": " + call.text + (call.text.empty() ? "" : ": ") +
                             "no such actor (it was stopped, or never spawned here)"),
           call.actor);
    return;
  }
  if (call.kind != CallKind::stop && detail::runs_on_receipt(*actor->type)) {
    QueuedCall now{source, std::move(call)};
    return run(*actor, now);
  }
  bool start;
  {
    std::lock_guard lock(actor->mutex);
    actor->mailbox.push_back(QueuedCall{source, std::move(call)});
    actor->metrics->mailbox.add(1);
    start = !actor->scheduled;
    actor->scheduled = true;
  }
  if (start) schedule(actor);
}

void RemoteActors::Impl::schedule(const std::shared_ptr<Hosted>& actor) {
  {
    std::lock_guard lock(mutex);
    ++running;
  }
  if (detail::serve_loop_here && detail::serve_loop_here->node == this) {
    detail::serve_loop_here->ready.push_back(actor);
    return;
  }
  drain_on_executor(actor);
}

void RemoteActors::Impl::drain_on_executor(const std::shared_ptr<Hosted>& actor) {
  auto run = [self = shared_from_this(), actor] { self->drain(*actor); };
  actor->executor->submit(std::make_shared<troupe::detail::Task<void, decltype(run)>>(std::move(run), actor->executor));
}

void RemoteActors::Impl::drain(Hosted& actor) {
  while (true) {
    QueuedCall call;
    {
      std::lock_guard lock(actor.mutex);
      if (actor.mailbox.empty()) {
        actor.scheduled = false;
        break;
      }
      call = std::move(actor.mailbox.front());
      actor.mailbox.pop_front();
      actor.metrics->mailbox.add(-1);
    }
    run(actor, call);
  }
  finished_running();
}

void RemoteActors::Impl::finished_running() {
  std::lock_guard lock(mutex);
  if (--running == 0) idle.notify_all();
}

std::string RemoteActors::Impl::where(const detail::Hosted& actor) const {
  return "remote actor '" + actor.name + "' on rank " + std::to_string(rank) + ": ";
}

void RemoteActors::Impl::run(Hosted& actor, QueuedCall& queued) {
  const int source = queued.source;
  CallFrame& call = queued.call;
  if (call.kind == CallKind::stop) return end(actor, queued);
  const std::string what = where(actor) + call.text + ": ";
  const auto start = std::chrono::steady_clock::now();
  std::optional<RemoteSpan> span;  // the end of the caller's arrow in a trace
  if (Profiler::global().recording())
    span.emplace(actor.name + "." + call.text, call.request ? Profiler::remote_flow_id(source, call.request) : 0);
  std::shared_ptr<void> object;  // held: an on_receipt actor's call may run while it is stopped
  {
    std::lock_guard lock(actor.mutex);
    object = actor.object;
  }
  WireValue result;
  std::exception_ptr failure;
  const bool snapshot = call.text == detail::kSnapshotMethod;  // taken in the mailbox's order
  const ActorType::Method* method = !snapshot ? actor.type->method(call.text)
                                    : actor.type->snapshot ? &*actor.type->snapshot : nullptr;
  if (!object) {
    failure = error<ValueError>(what + "the actor was stopped");
  } else if (snapshot && !method) {
    failure = error<ValueError>(what + (actor.type->name.empty() ? "it" : actor.type->name) + " declares no TROUPE_STATE");
  } else if (!method) {
    failure = error<ValueError>(what + "no such method; " + (actor.type->name.empty() ? "it" : actor.type->name) +
                                " has " + actor.type->method_names());
  } else {
    try {
      result = actor.lane ? call_on_lane(*actor.lane, *method, object.get(), call.value)
                          : method->call(object.get(), call.value);
    } catch (...) {
      failure = with_context(what, std::current_exception());
    }
  }
  if (metrics::enabled()) {
    actor.metrics->seconds.observe(metrics::seconds_since(start));
    actor.metrics->calls.add();
    if (failure) actor.metrics->errors.add();
  }
  if (failure) refuse(source, call.request, failure, actor.id);
  else if (call.request != 0) respond(source, call.request, std::move(result), what);
}

void RemoteActors::Impl::end(Hosted& actor, const QueuedCall& stop) {
  std::set<int> watchers;
  {
    std::lock_guard lock(mutex);
    hosted.erase(actor.id);
    watchers.swap(actor.watchers);
  }
  std::shared_ptr<void> object;
  {
    std::lock_guard lock(actor.mutex);
    object.swap(actor.object);
  }
  if (object) {
    object.reset();  // its destructor runs here, in the mailbox's order (or after a call on receipt)
    if (rank == 0) withdraw(rank, actor.name);
    else post_quietly(0, CallFrame{CallKind::withdraw, 0, 0, actor.name, WireValue()});
  }
  if (stop.call.request != 0) respond(stop.source, stop.call.request, WireValue(), where(actor));
  for (int r : watchers) post_quietly(r, CallFrame{CallKind::down, actor.id, 0, "", WireValue()});
}

void RemoteActors::Impl::add_watcher(int source, uint64_t id) {
  {
    std::lock_guard lock(mutex);
    if (auto it = hosted.find(id); it != hosted.end()) return (void)it->second->watchers.insert(source);
  }
  post_quietly(source, CallFrame{CallKind::down, id, 0,
                                 error_text(error<ValueError>("remote actor #" + std::to_string(id) + " on rank " +
                                                              std::to_string(rank) + ": no such actor")),
                                 WireValue()});
}

void RemoteActors::Impl::host_spawn(int source, CallFrame&& call) {
  const ActorType* type = find_actor_type(call.text);
  const uint64_t request = call.request;
  if (!type) {
    refuse(source, request,
           error<ValueError>("spawn_on: rank " + std::to_string(rank) + " has no actor type '" + call.text +
                             "' (registered there: " + actor_type_names() + ")"));
    return;
  }
  WireValue::List& items = call.value.as_list();
  std::string name = items[0].is_none() ? "" : items[0].as_string();
  const int replaces_rank = static_cast<int>(items[2].as_int());
  const uint64_t replaces_id = static_cast<uint64_t>(items[3].as_int());
  std::optional<WireValue> state;  // a respawn from a snapshot
  if (items.size() > 5) state = std::move(items[5]);
  Device device;
  try {
    device = Device::parse(items[4].as_string());
  } catch (...) {
    refuse(source, request, with_context("spawn_on: " + type->name + " on rank " + std::to_string(rank) + ": ",
                                         std::current_exception()));
    return;
  }
  {
    std::lock_guard lock(mutex);
    ++running;
  }
  auto construct = [self = shared_from_this(), type, source, request, name = std::move(name),
                    arguments = std::move(items[1]), state = std::move(state), replaces_rank, replaces_id, device]() mutable {
    self->construct(type, source, request, std::move(name), arguments, state, device, replaces_rank, replaces_id);
    self->finished_running();
  };
  constructor->submit(std::make_shared<troupe::detail::Task<void, decltype(construct)>>(std::move(construct), constructor));
}

void RemoteActors::Impl::construct(const ActorType* type, int source, uint64_t request, std::string name, const WireValue& arguments,
               const std::optional<WireValue>& state, Device device, int replaces_rank, uint64_t replaces_id) {
  const std::string what = "spawn_on: " + type->name + " on rank " + std::to_string(rank) + ": ";
  auto actor = std::make_shared<Hosted>();
  actor->type = std::shared_ptr<const ActorType>(std::shared_ptr<const void>(), type);  // registered: lives on
  try {
    actor->object = type->construct(arguments);
    if (state) {
      if (!type->restore) throw ValueError("a snapshot came, but " + type->name + " declares no TROUPE_STATE here");
      try {
        type->restore(actor->object.get(), *state);
      } catch (...) {
        std::rethrow_exception(with_context("restoring its snapshot: ", std::current_exception()));
      }
    }
    if (!device.is_cpu()) {
      actor->lane = troupe::Lane::make(device, type->name);
      if (type->move_to) type->move_to(actor->object.get(), device);  // its state goes there once
    }
  } catch (...) {
    refuse(source, request, with_context(what, std::current_exception()));
    return;
  }
  {
    std::lock_guard lock(mutex);
    actor->id = next_actor++;
    if (name.empty()) {
      const int n = spawned[type->name]++;
      name = type->name + "/" + std::to_string(rank) + (n == 0 ? "" : "." + std::to_string(n));
    }
    actor->name = name;
    actor->metrics = std::make_unique<metrics::ActorMetrics>(name);
    hosted.emplace(actor->id, actor);
  }
  actor->executor = troupe::detail::spawn_module_actor(actor->name, /*counted=*/false);
  auto enrolled = [self = shared_from_this(), actor, source, request, what](WireValue&&, std::exception_ptr e) {
    if (e) {
      {
        std::lock_guard lock(self->mutex);
        self->hosted.erase(actor->id);
      }
      self->refuse(source, request, with_context(what, e));
      return;
    }
    self->respond(source, request,
                  WireValue::list({WireValue::integer(static_cast<int64_t>(actor->id)), WireValue::string(actor->name)}), what);
  };
  ask(0,
      CallFrame{CallKind::enroll, actor->id, 0, actor->name,
                WireValue::list({WireValue::string(type->name), WireValue::integer(replaces_rank),
                             WireValue::integer(static_cast<int64_t>(replaces_id))})},
      what + "enrolling '" + actor->name + "' with rank 0: ", std::move(enrolled));
}

std::shared_ptr<detail::ActorRef> RemoteActors::Impl::host_object(std::string name, std::shared_ptr<void> object,
                                                                  std::shared_ptr<const ActorType> methods) {
  const std::string what = "host('" + name + "') on rank " + std::to_string(rank) + ": ";
  if (name.empty()) throw ValueError("host: an actor hosted on rank " + std::to_string(rank) + " needs a name");
  if (!object) throw ValueError(what + "no object");
  auto actor = std::make_shared<Hosted>();
  actor->name = name;
  actor->type = std::move(methods);
  actor->object = std::move(object);
  actor->metrics = std::make_unique<metrics::ActorMetrics>(name);
  actor->executor = troupe::detail::spawn_module_actor(name, /*counted=*/false);
  {
    std::lock_guard lock(mutex);
    actor->id = next_actor++;
    hosted.emplace(actor->id, actor);
  }
  try {
    ask_and_wait(0,
                 CallFrame{CallKind::enroll, actor->id, 0, name,
                           WireValue::list({WireValue::string(""), WireValue::integer(-1), WireValue::integer(0)})},
                 "");
  } catch (...) {
    {
      std::lock_guard lock(mutex);
      hosted.erase(actor->id);
    }
    std::rethrow_exception(with_context(what, std::current_exception()));
  }
  return make_ref(std::move(name), "", rank, actor->id);
}

}  // namespace troupe::net
