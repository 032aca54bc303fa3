// Supervised actors that come back with their state: the supervising rank (the one that spawned
// the actor with max_restarts) keeps the last snapshot of its TROUPE_STATE and a log of the calls
// made through its handle since then. When the actor's rank is lost, supervision.cpp respawns it
// on a live rank from the snapshot and replay() sends the logged calls again, in their order:
//
//   snapshot S | deposit(5) answered | deposit(7) in flight | rank lost
//   respawn(S) -> deposit(5) again (answer dropped) -> deposit(7) again (answered now)
//
// A snapshot is a call in the mailbox (kSnapshotMethod), so it holds the effect of exactly the
// calls made before it: the log drops those once it comes back. Replay stops at the first call
// since the snapshot that changed the state and is not replayable: what came after it cannot be
// rebuilt, so its calls are dropped and those in flight fail with PeerLostError (at most once).
#include <iostream>

#include "net/remote/endpoint.h"

namespace troupe::net {

using detail::error;
using detail::KeptState;
using detail::LoggedCall;

namespace {

bool is_peer_lost(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const PeerLostError&) {
    return true;
  } catch (...) {
    return false;
  }
}

// A logged call to send, copied out of the log under the handle's mutex.
struct Outgoing {
  uint64_t number = 0;
  std::string method;
  WireValue arguments;
  bool request = false, replayable = false;
  uint32_t attempt = 0;
};

Outgoing outgoing(uint64_t number, LoggedCall& call) {
  call.sent = true;
  call.awaited = call.request;
  return {number, call.method, call.arguments, call.request, call.replayable, ++call.attempt};
}

// A snapshot came back: the calls made before it are in it. Those still waiting for their answer
// stay until it comes, but are never sent again.
void cover(KeptState& kept, uint64_t snapshot) {
  for (auto it = kept.log.begin(); it != kept.log.end() && it->first < snapshot;) {
    if (!it->second.awaited) {
      it = kept.log.erase(it);
    } else {
      it->second.covered = true;
      ++it;
    }
  }
}

// The answer to one send of a logged call, to rank `at`. A replayable call that meets the loss of
// that rank waits for the respawn (replay() sends it again); anything else goes to the caller (a
// PeerLostError from further away too: the method's own call to a lost rank).
detail::Answer logged_answer(RemoteActors::Impl& node, const std::shared_ptr<detail::ActorRef>& ref, int at,
                             uint64_t number, uint32_t attempt) {
  return [node = node.weak_from_this(), ref, at, number, attempt](WireValue&& result, std::exception_ptr e) {
    const auto here = node.lock();
    const bool rank_lost = e && here && here->transport.is_gone(at) && is_peer_lost(e);
    detail::Answer answer;
    {
      std::lock_guard lock(ref->mutex);
      KeptState& kept = *ref->kept;
      auto it = kept.log.find(number);
      if (it == kept.log.end() || it->second.attempt != attempt) return;  // an earlier send's
      LoggedCall& call = it->second;
      if (rank_lost && call.replayable && !call.covered && (ref->restarts_left > 0 || ref->restarting)) return;
      if (!e && call.method == detail::kSnapshotMethod) {
        kept.state = std::move(result);
        result = WireValue();
        cover(kept, number);
      }
      if (e && !call.answer && call.method == detail::kSnapshotMethod && !rank_lost)  // nobody waits for it
        std::cerr << "remote actors: rank " << (here ? here->rank : -1) << ": a snapshot of '" << ref->name
                  << "' failed (the last one is kept): " << encode_error(e).message << std::endl;
      answer = std::move(call.answer);
      call.answer = nullptr;
      call.awaited = false;
      // A call that changed the state stays: replay() runs it again, or stops at it.
      if (!call.changes_state || call.covered) kept.log.erase(it);
    }
    if (answer) answer(std::move(result), e);
  };
}

void send_logged(RemoteActors::Impl& node, const std::shared_ptr<detail::ActorRef>& ref, int at, uint64_t id,
                 Outgoing call) {
  const std::string what = RemoteActors::Impl::describe(ref->name, at, call.method);
  CallFrame frame{call.request ? CallKind::request : CallKind::tell, id, 0, call.method, std::move(call.arguments)};
  if (call.request) return node.ask(at, std::move(frame), what, logged_answer(node, ref, at, call.number, call.attempt));
  try {
    node.post(at, std::move(frame));
  } catch (const PeerLostError&) {
    std::lock_guard lock(ref->mutex);
    if (call.replayable && (ref->restarts_left > 0 || ref->restarting)) return;  // replay() sends it again
    std::rethrow_exception(with_context(what, std::current_exception()));
  } catch (...) {
    std::rethrow_exception(with_context(what, std::current_exception()));
  }
}

}  // namespace

void RemoteActors::Impl::call_kept(const std::shared_ptr<ActorRef>& ref, std::string_view method, WireValue arguments,
                                   Answer answer) {
  KeptState& kept = *ref->kept;
  std::lock_guard sending(kept.sending);
  std::vector<Outgoing> out;
  int at;
  uint64_t id;
  std::exception_ptr down;
  {
    std::lock_guard lock(ref->mutex);
    at = ref->rank;
    id = ref->id;
    if (ref->down) {
      down = ref->down_error ? ref->down_error : error<ValueError>("the actor was stopped");
    } else {
      // Logs a call (a snapshot is a request whatever its answer), and says whether it changes the state.
      auto log = [&](std::string_view name, WireValue args, Answer reply) {
        const bool snapshot = name == detail::kSnapshotMethod;
        const ActorType::Method* m = snapshot ? &*kept.type->snapshot : kept.type->method(name);
        const uint64_t number = kept.next_call++;
        LoggedCall& call = kept.log[number];
        call.method = std::string(name);
        call.arguments = std::move(args);
        call.request = reply != nullptr || snapshot;
        call.answer = std::move(reply);
        call.awaited = call.request;
        call.replayable = m && m->replayable;
        call.changes_state = m && m->changes_state;  // an unknown method is refused: it changes nothing
        if (!ref->restarting) out.push_back(outgoing(number, call));  // else replay() sends it
        if (snapshot) kept.calls = 0;
        return call.changes_state;
      };
      if (log(method, std::move(arguments), std::move(answer)) && kept.snapshot_every > 0 &&
          ++kept.calls >= kept.snapshot_every)
        log(detail::kSnapshotMethod, WireValue::list({}), nullptr);
    }
  }
  if (down) {
    const std::exception_ptr e = with_context(describe(ref->name, at, method), down);
    if (!answer) std::rethrow_exception(e);
    return answer({}, e);
  }
  std::exception_ptr failed;  // a tell that could not go: after the calls logged with it went
  for (Outgoing& call : out) {
    try {
      send_logged(*this, ref, at, id, std::move(call));
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
}

void RemoteActors::Impl::replay(const std::shared_ptr<ActorRef>& ref, int to, uint64_t id) {
  KeptState& kept = *ref->kept;
  std::vector<std::pair<std::string, Answer>> failed;  // in flight, not replayed
  std::string broken_at;  // the first call since the snapshot that changed the state and is not replayable
  size_t dropped = 0;
  uint64_t next = 0;
  {
    std::lock_guard lock(ref->mutex);
    ref->rank = to;
    ref->id = id;
  }
  while (true) {
    Outgoing call;
    {
      std::lock_guard lock(ref->mutex);
      auto it = kept.log.lower_bound(next);
      while (it != kept.log.end()) {
        LoggedCall& c = it->second;
        if (!c.sent || (broken_at.empty() && c.replayable && !c.covered)) break;  // this one goes
        if (c.covered) {  // its answer comes from the lost rank, or its loss fails it
          ++it;
          continue;
        }
        if (c.changes_state && !c.replayable && broken_at.empty()) broken_at = c.method;
        if (c.changes_state) ++dropped;
        if (c.answer) failed.emplace_back(c.method, std::move(c.answer));
        it = kept.log.erase(it);
      }
      if (it == kept.log.end()) {
        ref->restarting = false;  // calls made from now on are sent as usual
        break;
      }
      next = it->first + 1;
      call = outgoing(it->first, it->second);
    }
    try {
      send_logged(*this, ref, to, id, std::move(call));
    } catch (const std::exception& e) {  // a tell that could not go: its sender is gone
      std::cerr << "remote actors: rank " << rank << ": replaying a call: " << e.what() << std::endl;
    }
  }
  if (!broken_at.empty())
    std::cerr << "remote actors: rank " << rank << ": '" << ref->name << "' respawned on rank " << to
              << " from its last snapshot without " << dropped << " call(s) made since: " << broken_at
              << " is not replayable (net::replayable), so what it and the calls after it changed is lost" << std::endl;
  const std::string why = broken_at.empty() ? std::string("it is not replayable")
                                             : broken_at + ", called since the last snapshot, is not replayable";
  for (auto& [method, answer] : failed)
    answer({}, with_context(describe(ref->name, to, method),
                            error<PeerLostError>("the actor's rank was lost with this call in flight, and the call "
                                                 "is not run again: " + why)));
}

void RemoteActors::Impl::fail_kept(const std::shared_ptr<ActorRef>& ref, std::exception_ptr why) {
  std::vector<std::pair<std::string, Answer>> failed;
  int at;
  {
    std::lock_guard lock(ref->mutex);
    at = ref->rank;
    for (auto& [number, call] : ref->kept->log)
      if (call.answer) failed.emplace_back(call.method, std::move(call.answer));
    ref->kept->log.clear();
  }
  if (!why) why = error<ValueError>("the actor was stopped");
  for (auto& [method, answer] : failed) answer({}, with_context(describe(ref->name, at, method), why));
}

}  // namespace troupe::net
