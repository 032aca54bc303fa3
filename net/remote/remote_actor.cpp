#include "net/remote/endpoint.h"

#include <condition_variable>
#include <thread>

#include "actors/promise.h"

namespace troupe::net {

using detail::ActorRef;
using detail::Answer;
using detail::error;

namespace {

std::mutex current_mutex;  // guards the four below
std::shared_ptr<RemoteActors::Impl> current_node;
bool current_is_shared = false;           // ensure() made it
std::weak_ptr<RemoteActors> shared_node;  // ensure()'s, while somebody holds it
std::condition_variable current_closed;
std::mutex ensure_mutex;  // one ensure() at a time, so that only one makes a RemoteActors

std::shared_ptr<RemoteActors::Impl> current(const char* what) {
  std::lock_guard lock(current_mutex);
  if (!current_node)
    throw ValueError(std::string(what) + ": this rank has no RemoteActors (make one from the world group first)");
  return current_node;
}

}  // namespace

RemoteActors::RemoteActors(std::shared_ptr<ProcessGroup> world) {
  if (!world) throw ValueError("RemoteActors: no process group");
  if (world->id() != 0 || world->size() != world->transport().world_size())
    throw ValueError("RemoteActors: needs the world group (init_process_group's), not a sub-group");
  open(std::move(world), false);
}

std::shared_ptr<RemoteActors> RemoteActors::ensure(const std::shared_ptr<ProcessGroup>& group) {
  if (!group) throw ValueError("RemoteActors::ensure: no process group");
  std::lock_guard making(ensure_mutex);
  {
    std::unique_lock lock(current_mutex);
    while (current_node) {
      if (!current_is_shared) return nullptr;
      if (auto shared = shared_node.lock()) return shared;
      current_closed.wait(lock);  // its last holder is closing it
    }
  }
  std::shared_ptr<RemoteActors> made(new RemoteActors());
  made->open(group, true);
  std::lock_guard lock(current_mutex);
  shared_node = made;
  return made;
}

void RemoteActors::open(std::shared_ptr<ProcessGroup> group, bool shared) {
  auto impl = std::make_shared<Impl>(std::move(group));
  {
    std::lock_guard lock(current_mutex);
    if (current_node)
      throw ValueError(current_is_shared ? "RemoteActors: this process has one already, made for a library on a process "
                                           "group (an Executor's): make the program's before it"
                                         : "RemoteActors: this process has one already; one at a time");
    current_node = impl;
    current_is_shared = shared;
    impl->generation = impl->transport.open_actor_generation();
  }
  impl_ = std::move(impl);
  auto handler = std::make_shared<ActorHandler>();
  std::weak_ptr<Impl> weak = impl_;
  handler->on_frame = [weak](Message&& m) {
    if (auto node = weak.lock()) node->on_frame(std::move(m));
  };
  handler->on_peer_lost = [weak](int r, std::exception_ptr why) {
    if (auto node = weak.lock()) node->on_peer_lost(r, why);
  };
  impl_->transport.set_actor_handler(std::move(handler));
  // Ranks lost before this point are not reported again.
  for (int r = 0; r < impl_->size; ++r)
    if (impl_->transport.is_gone(r)) impl_->on_peer_lost(r, error<PeerLostError>("rank " + std::to_string(r) + " is gone"));
}

RemoteActors::~RemoteActors() {
  if (!impl_) return;  // open() failed
  impl_->close();
  std::lock_guard lock(current_mutex);
  if (current_node == impl_) {
    current_node.reset();
    current_is_shared = false;
  }
  current_closed.notify_all();
}

const std::string& RemoteActor::name() const {
  if (!ref_) throw ValueError("RemoteActor: the handle is empty");
  return ref_->name;
}

const std::string& RemoteActor::type() const {
  if (!ref_) throw ValueError("RemoteActor: the handle is empty");
  return ref_->type;
}

int RemoteActor::rank() const {
  if (!ref_) throw ValueError("RemoteActor: the handle is empty");
  std::lock_guard lock(ref_->mutex);
  return ref_->rank;
}

void RemoteActor::on_down(std::function<void(std::exception_ptr why)> fn) const {
  auto node = ref_ ? ref_->node.lock() : nullptr;
  if (!node) throw ValueError("RemoteActor::on_down: the handle is empty, or its RemoteActors is gone");
  bool first, down;
  std::exception_ptr why;
  {
    std::lock_guard lock(ref_->mutex);
    down = ref_->down;
    why = ref_->down_error;
    if (!down) ref_->on_down.push_back(fn);
    first = !ref_->watched;
  }
  if (down) return fn(why);
  if (first) node->watch(ref_);
}

void RemoteActor::stop() const {
  auto node = ref_ ? ref_->node.lock() : nullptr;
  if (!node) throw ValueError("RemoteActor::stop: the handle is empty, or its RemoteActors is gone");
  int at;
  uint64_t id;
  {
    std::lock_guard lock(ref_->mutex);
    if (ref_->down) return;
    at = ref_->rank;
    id = ref_->id;
  }
  node->ask_and_wait(at, CallFrame{CallKind::stop, id, 0, "", WireValue()}, RemoteActors::Impl::describe(ref_->name, at, "stop"));
  node->finish_down(ref_, nullptr);
}

void RemoteActor::snapshot() const {
  auto node = ref_ ? ref_->node.lock() : nullptr;
  if (!node) throw ValueError("RemoteActor::snapshot: the handle is empty, or its RemoteActors is gone");
  if (!ref_->kept)
    throw ValueError("RemoteActor::snapshot: remote actor '" + ref_->name +
                     "' keeps no state here: snapshots are for a type with TROUPE_STATE, spawned from this handle "
                     "with max_restarts > 0");
  Promise<WireValue> promise;
  Future<WireValue> kept = promise.future();
  node->call_kept(ref_, detail::kSnapshotMethod, WireValue::list({}), [promise](WireValue&&, std::exception_ptr e) mutable {
    if (e) promise.set_exception(e);
    else promise.set_value(WireValue());
  });
  wait(kept);
}

void RemoteActor::check() const {
  auto node = ref_ ? ref_->node.lock() : nullptr;
  if (!node) throw ValueError("RemoteActor::check: the handle is empty, or its RemoteActors is gone");
  if (std::exception_ptr failed = node->take_send_failure(*ref_)) std::rethrow_exception(failed);
}

RemoteActor lookup(std::string_view name, std::chrono::milliseconds wait_for) {
  auto node = current("lookup");
  const Deadline deadline = deadline_after(wait_for);
  while (true) {
    try {
      WireValue found = node->ask_and_wait(0, CallFrame{CallKind::lookup, 0, 0, std::string(name), WireValue()},
                                       "lookup('" + std::string(name) + "'): ");
      const WireValue::List& items = found.as_list();
      return RemoteActor(node->make_ref(std::string(name), items.at(2).as_string(), static_cast<int>(items.at(0).as_int()),
                                        static_cast<uint64_t>(items.at(1).as_int())));
    } catch (const ValueError&) {
      if (Clock::now() >= deadline) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

void serve() { current("serve")->serve(); }

std::shared_ptr<RemoteActors::Impl> this_node(const char* what) { return current(what); }

int actors_rank() { return current("actors_rank")->rank; }
int actors_world_size() { return current("actors_world_size")->size; }

namespace detail {

RemoteActor host(std::string_view name, std::shared_ptr<void> object, std::shared_ptr<const ActorType> methods) {
  return RemoteActor(current("host")->host_object(std::string(name), std::move(object), std::move(methods)));
}

RemoteActor spawn(const SpawnOptions& options, std::string_view type, WireValue arguments) {
  auto node = current("spawn_on");
  if (options.rank < 0 || options.rank >= node->size)
    throw IndexError("spawn_on: rank " + std::to_string(options.rank) + " outside a world of " +
                     std::to_string(node->size));
  if (options.max_restarts < 0) throw ValueError("spawn_on: max_restarts must be >= 0");
  if (options.snapshot_every < 0) throw ValueError("spawn_on: snapshot_every must be >= 0");
  const ActorType* known = find_actor_type(type);  // state is kept when this rank knows the type has some
  const bool keeps_state = options.max_restarts > 0 && known && known->snapshot;
  if (options.snapshot_every > 0 && !keeps_state)
    throw ValueError("spawn_on: " + std::string(type) + ": snapshot_every needs max_restarts > 0 and a type with " +
                     "TROUPE_STATE registered on this rank (" +
                     (options.max_restarts == 0 ? "max_restarts is 0"
                      : !known                  ? "it is not registered here"
                                                : "it declares no TROUPE_STATE") +
                     ")");
  WireValue name = options.name.empty() ? WireValue() : WireValue::string(options.name);
  WireValue answer = node->ask_and_wait(
      options.rank,
      CallFrame{CallKind::spawn, 0, 0, std::string(type),
                WireValue::list({name, arguments, WireValue::integer(-1), WireValue::integer(0), WireValue::string(options.device.str())})},
      "spawn_on: " + std::string(type) + " on rank " + std::to_string(options.rank) + ": ");
  const WireValue::List& items = answer.as_list();
  auto ref = node->make_ref(items.at(1).as_string(), std::string(type), options.rank,
                            static_cast<uint64_t>(items.at(0).as_int()));
  if (options.max_restarts > 0) {
    ref->arguments = std::move(arguments);
    ref->device = options.device.str();
    ref->restarts_left = options.max_restarts;
    if (keeps_state) {
      ref->kept = std::make_unique<detail::KeptState>();
      ref->kept->type = known;
      ref->kept->snapshot_every = options.snapshot_every;
    }
    node->watch(ref);
  }
  return RemoteActor(ref);
}

void call(const std::shared_ptr<ActorRef>& actor, std::string_view method, WireValue arguments, Answer answer) {
  if (!actor) throw ValueError("RemoteActor: the handle is empty");
  auto node = actor->node.lock();
  if (!node) throw ValueError("remote actor '" + actor->name + "': this rank's RemoteActors is gone");
  if (std::exception_ptr failed = node->take_send_failure(*actor)) std::rethrow_exception(failed);  // not made
  if (actor->kept) return node->call_kept(actor, method, std::move(arguments), std::move(answer));
  node->call(actor, method, std::move(arguments), std::move(answer));
}

bool receive_for(ActorRef& actor, const troupe::detail::TaskBase& reply) {
  auto node = actor.node.lock();
  if (!node) return false;
  {
    std::lock_guard lock(actor.mutex);
    if (actor.rank == node->rank) return false;  // answered here, not through the transport
  }
  return node->transport.try_drive([&] { return reply.is_done(); },
                                   deadline_after(std::chrono::milliseconds(2)));
}

bool receive_here(const troupe::detail::TaskBase& reply) {
  std::shared_ptr<RemoteActors::Impl> node;
  {
    std::lock_guard lock(current_mutex);
    node = current_node;
  }
  if (!node) return false;
  return node->transport.try_drive([&] { return reply.is_done(); }, deadline_after(std::chrono::milliseconds(2)));
}

std::exception_ptr result_error(const std::shared_ptr<ActorRef>& actor, std::string_view method) {
  std::string what;
  {
    std::lock_guard lock(actor->mutex);
    what = RemoteActors::Impl::describe(actor->name, actor->rank, method);
  }
  return with_context(what + "result: ", std::current_exception());
}

}  // namespace detail
}  // namespace troupe::net
