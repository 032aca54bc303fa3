#include "net/remote/endpoint.h"

namespace troupe::net {

using detail::error;

std::shared_ptr<detail::ActorRef> RemoteActors::Impl::make_ref(std::string name, std::string type, int at, uint64_t id) {
  auto ref = std::make_shared<ActorRef>();
  ref->node = weak_from_this();
  ref->name = std::move(name);
  ref->type = std::move(type);
  ref->rank = at;
  ref->id = id;
  return ref;
}

void RemoteActors::Impl::watch(const std::shared_ptr<ActorRef>& ref) {
  int at;
  uint64_t id;
  {
    std::lock_guard ref_lock(ref->mutex);
    if (ref->down || ref->restarting) return;
    ref->watched = true;
    at = ref->rank;
    id = ref->id;
  }
  {
    std::lock_guard lock(mutex);
    watched.emplace(std::make_pair(at, id), ref);
  }
  if (transport.is_gone(at)) return actor_down(ref, error<PeerLostError>("rank " + std::to_string(at) + " is gone"));
  post_quietly(at, CallFrame{CallKind::monitor, id, 0, "", WireValue()});
}

void RemoteActors::Impl::actor_ended(int source, uint64_t id, std::exception_ptr why) {
  std::vector<std::shared_ptr<ActorRef>> ended;
  {
    std::lock_guard lock(mutex);
    auto [first, last] = watched.equal_range({source, id});
    for (auto it = first; it != last; ++it)
      if (auto ref = it->second.lock()) ended.push_back(std::move(ref));
    watched.erase(first, last);
  }
  for (auto& ref : ended) finish_down(ref, why);
}

int RemoteActors::Impl::claim_restart(const std::shared_ptr<ActorRef>& ref) {
  std::lock_guard lock(ref->mutex);
  if (ref->down || ref->restarting) return kNoRestart;
  if (ref->restarts_left <= 0) return kRestartsSpent;
  --ref->restarts_left;
  ref->restarting = true;
  return ref->rank;
}

void RemoteActors::Impl::restart_claimed(const std::shared_ptr<ActorRef>& ref, int from, std::exception_ptr why) {
  if (from == kNoRestart) return;
  if (from == kRestartsSpent) return finish_down(ref, why);
  respawn(ref, from, why);
}

void RemoteActors::Impl::actor_down(const std::shared_ptr<ActorRef>& ref, std::exception_ptr why) {
  restart_claimed(ref, claim_restart(ref), why);
}

void RemoteActors::Impl::finish_down(const std::shared_ptr<ActorRef>& ref, std::exception_ptr why) {
  std::vector<std::function<void(std::exception_ptr)>> callbacks;
  std::vector<std::function<void()>> held;
  {
    std::lock_guard lock(ref->mutex);
    if (ref->down) return;
    ref->down = true;
    ref->restarting = false;
    ref->down_error = why;
    callbacks.swap(ref->on_down);
    held.swap(ref->held);
  }
  for (auto& call : held) call();  // they fail now, as the actor is down
  if (ref->kept) fail_kept(ref, why);
  for (auto& fn : callbacks) fn(why);
}

void RemoteActors::Impl::respawn(const std::shared_ptr<ActorRef>& ref, int from, std::exception_ptr why) {
  int to = -1;
  for (int k = 1; k <= size && to < 0; ++k) {
    const int candidate = (from + k) % size;
    if (candidate != from && !transport.is_gone(candidate)) to = candidate;
  }
  if (to < 0) {
    {
      std::lock_guard lock(ref->mutex);
      ref->restarting = false;
    }
    return finish_down(ref, why);
  }
  uint64_t old_id;
  WireValue::List spawn;  // [name, arguments, replaced rank, replaced id, device(, state)]
  {
    std::lock_guard lock(ref->mutex);
    old_id = ref->id;
    spawn = {WireValue::string(ref->name), ref->arguments, WireValue::integer(from), WireValue::integer(static_cast<int64_t>(old_id)),
             WireValue::string(ref->device)};
    if (ref->kept && ref->kept->state) spawn.push_back(*ref->kept->state);  // restored after the constructor
  }
  auto respawned = [self = shared_from_this(), ref, to, why](WireValue&& result, std::exception_ptr e) {
    if (ref->kept && !e) {  // the calls since the snapshot go first; restarting ends with them
      self->replay(ref, to, static_cast<uint64_t>(result.as_list().at(0).as_int()));
      return self->watch(ref);
    }
    std::vector<std::function<void()>> held;
    {
      std::lock_guard lock(ref->mutex);
      ref->restarting = false;
      ref->rank = to;  // on failure too: the next attempt starts after it
      if (!e) {
        ref->id = static_cast<uint64_t>(result.as_list().at(0).as_int());
        held.swap(ref->held);
      }
    }
    if (e) return self->actor_down(ref, e);  // tries the next rank while restarts are left
    self->watch(ref);
    for (auto& call : held) call();
  };
  ask(to, CallFrame{CallKind::spawn, 0, 0, ref->type, WireValue::list(std::move(spawn))},
      "restarting remote actor '" + ref->name + "' on rank " + std::to_string(to) + ": ", std::move(respawned));
}

}  // namespace troupe::net
