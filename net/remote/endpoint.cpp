#include "net/remote/endpoint.h"

#include <iostream>

#include "actors/module_actor.h"
#include "actors/observe/profiler.h"
#include "actors/promise.h"

namespace troupe::net {

using detail::error;
using detail::error_text;

RemoteActors::Impl::Impl(std::shared_ptr<ProcessGroup> made_on)
    : group(std::move(made_on)),
      transport(group->transport()),
      rank(transport.rank()),
      size(transport.world_size()),
      roles(size, Role::driving),
      constructor(troupe::detail::spawn_module_actor("remote actors: constructors")) {
  std::lock_guard lock(mutex);
  update_drivers_done();  // a world of one has no driver to wait for
}

void RemoteActors::Impl::post(int dst, CallFrame call, bool awaits_answer) {
  if (dst == rank) return dispatch(rank, std::move(call));
  call.generation = generation;
  EncodedCall wire = encode_call(call);
  transport.send_actor_frame(dst, std::move(wire.bytes), wire.tensors, awaits_answer);
}

void RemoteActors::Impl::ask(int dst, CallFrame call, std::string what, Answer answer) {
  {
    std::lock_guard lock(mutex);
    call.request = next_request++;
    pending.emplace(call.request, Pending{dst, std::move(what), std::move(answer)});
  }
  const uint64_t id = call.request;
  // The start of the trace's arrow to the callee's span (hosting.cpp).
  if (call.kind == CallKind::request && Profiler::global().recording())
    Profiler::record_remote_call("call " + call.text, Profiler::remote_flow_id(rank, id));
  try {
    post(dst, std::move(call), /*awaits_answer=*/true);
  } catch (...) {
    fail_pending(id, std::current_exception());
  }
}

void RemoteActors::Impl::fail_pending(uint64_t id, std::exception_ptr e) {
  std::optional<Pending> p = take_pending(id);
  if (p) p->answer({}, with_context(p->what, e));
}

std::optional<RemoteActors::Impl::Pending> RemoteActors::Impl::take_pending(uint64_t id) {
  std::lock_guard lock(mutex);
  auto it = pending.find(id);
  if (it == pending.end()) return std::nullopt;  // answered already, or failed by a loss
  Pending p = std::move(it->second);
  pending.erase(it);
  return p;
}

void RemoteActors::Impl::respond(int dst, uint64_t request, WireValue result, const std::string& what) {
  try {
    post(dst, CallFrame{CallKind::reply, 0, request, "", std::move(result)});
  } catch (const CommError&) {
  } catch (...) {  // the result cannot be encoded
    refuse(dst, request, with_context(what + "result: ", std::current_exception()));
  }
}

void RemoteActors::Impl::refuse(int dst, uint64_t request, std::exception_ptr e, uint64_t actor) {
  if (request != 0 || actor != 0) {
    try {
      return post(dst, CallFrame{CallKind::failure, actor, request, error_text(e), WireValue()});
    } catch (const CommError&) {
      if (request != 0) return;  // the caller is gone, and its request with it
    }
  }
  // A failed notice, or a send() whose sender is gone: nobody else can hear of it.
  std::cerr << "remote actors: rank " << rank << ": a call sent by rank " << dst
            << " failed: " << encode_error(e).message << std::endl;
}

void RemoteActors::Impl::send_failed(int at, uint64_t actor, std::exception_ptr why) {
  std::lock_guard lock(mutex);
  send_failures.try_emplace({at, actor}, with_context("an earlier send(): ", why));  // the first is kept
  send_failure_count.store(send_failures.size(), std::memory_order_release);
}

std::exception_ptr RemoteActors::Impl::take_send_failure(ActorRef& ref) {
  if (send_failure_count.load(std::memory_order_acquire) == 0) return nullptr;  // the usual case: no locks
  std::pair<int, uint64_t> key;
  {
    std::lock_guard lock(ref.mutex);
    key = {ref.rank, ref.id};
  }
  std::lock_guard lock(mutex);
  auto it = send_failures.find(key);
  if (it == send_failures.end()) return nullptr;
  std::exception_ptr failed = std::move(it->second);
  send_failures.erase(it);
  send_failure_count.store(send_failures.size(), std::memory_order_release);
  return failed;
}

void RemoteActors::Impl::post_quietly(int dst, CallFrame call) {
  try {
    post(dst, std::move(call));
  } catch (const CommError&) {
  }
}

void RemoteActors::Impl::broadcast(CallKind kind) {
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    try {
      post(r, CallFrame{kind, 0, 0, "", WireValue()});
    } catch (const CommError&) {
    }
  }
}

void RemoteActors::Impl::on_frame(Message&& m) {
  CallFrame call = decode_call(m.payload.raw_data(), m.payload.nbytes(), m.parts);  // CommError: malformed
  if (call.generation > generation) return transport.keep_actor_frame(std::move(m));  // for the next one
  if (call.generation < generation) return;  // an earlier one's, done with
  dispatch(m.source, std::move(call));
}

void RemoteActors::Impl::dispatch(int source, CallFrame&& call) {
  const CallKind kind = call.kind;
  const uint64_t request = call.request;  // both kept: the handlers below take the call
  try {
    switch (call.kind) {
      case CallKind::request:
      case CallKind::tell:
      case CallKind::stop: return deliver(source, std::move(call));
      case CallKind::reply:
        if (auto p = take_pending(call.request)) p->answer(std::move(call.value), nullptr);
        return;
      case CallKind::failure:
        if (call.request == 0) return send_failed(source, call.actor, decode_error(ErrorRecord::parse(call.text)));
        if (auto p = take_pending(call.request)) p->answer({}, decode_error(ErrorRecord::parse(call.text)));
        return;
      case CallKind::spawn: return host_spawn(source, std::move(call));
      case CallKind::enroll: return enroll(source, call);
      case CallKind::withdraw: return withdraw(source, call.text);
      case CallKind::lookup: return answer_lookup(source, call);
      case CallKind::monitor: return add_watcher(source, call.actor);
      case CallKind::down:
        return actor_ended(source, call.actor,
                           call.text.empty() ? nullptr : decode_error(ErrorRecord::parse(call.text)));
      case CallKind::serving: return set_role(source, Role::serving);
      case CallKind::done: return set_role(source, Role::done);
    }
  } catch (const CommError&) {
    throw;  // a malformed frame: the transport drops the peer
  } catch (...) {
    // A call that waits for an answer gets the failure as its answer: raised where it was made.
    // A notice or an answer has nobody waiting, nor an actor to keep it for: the failure is printed.
    const bool answered = kind != CallKind::reply && kind != CallKind::failure;
    refuse(source, answered ? request : 0,
           with_context(std::string(name(kind)) + " from rank " + std::to_string(source) + ": ",
                        std::current_exception()));
  }
}

void RemoteActors::Impl::on_peer_lost(int r, std::exception_ptr why) {
  std::vector<Pending> failed;
  std::vector<std::shared_ptr<ActorRef>> ended;
  {
    std::lock_guard lock(mutex);
    for (auto it = pending.begin(); it != pending.end();) {
      if (it->second.rank != r) {
        ++it;
        continue;
      }
      failed.push_back(std::move(it->second));
      it = pending.erase(it);
    }
    if (roles[r] == Role::driving && !driver_lost) driver_lost = why;
    if (roles[r] != Role::done) roles[r] = Role::lost;
    update_drivers_done();
    std::erase_if(directory, [&](const auto& entry) { return entry.second.rank == r; });
    for (auto& [id, actor] : hosted) actor->watchers.erase(r);
    for (auto it = watched.lower_bound({r, 0}); it != watched.end() && it->first.first == r;) {
      if (auto ref = it->second.lock()) ended.push_back(std::move(ref));
      it = watched.erase(it);
    }
  }
  // The rank's supervised actors hold their calls before any answer fails or any respawns: a
  // caller woken by either could otherwise call another of them, still on the lost rank, and fail.
  std::vector<int> from;
  for (auto& ref : ended) from.push_back(claim_restart(ref));
  for (Pending& p : failed) p.answer({}, with_context(p.what, why));
  for (size_t i = 0; i < ended.size(); ++i) restart_claimed(ended[i], from[i], why);
}

void RemoteActors::Impl::call(const std::shared_ptr<ActorRef>& ref, std::string_view method, WireValue arguments,
                              Answer answer) {
  int at;
  uint64_t id;
  std::exception_ptr down;
  {
    std::lock_guard lock(ref->mutex);
    if (ref->restarting) {
      ref->held.push_back([self = shared_from_this(), ref, method = std::string(method), arguments,
                           answer]() mutable { self->call(ref, method, std::move(arguments), std::move(answer)); });
      return;
    }
    at = ref->rank;
    id = ref->id;
    if (ref->down)
      down = ref->down_error ? ref->down_error : error<ValueError>("the actor was stopped");
  }
  const std::string what = describe(ref->name, at, method);
  if (down) {
    if (!answer) std::rethrow_exception(with_context(what, down));
    return answer({}, with_context(what, down));
  }
  CallFrame frame{answer ? CallKind::request : CallKind::tell, id, 0, std::string(method), std::move(arguments)};
  if (!answer) {
    try {
      post(at, std::move(frame));
    } catch (...) {
      std::rethrow_exception(with_context(what, std::current_exception()));
    }
    return;
  }
  ask(at, std::move(frame), what, std::move(answer));
}

WireValue RemoteActors::Impl::ask_and_wait(int dst, CallFrame call, std::string what) {
  Promise<WireValue> promise;
  Future<WireValue> future = promise.future();
  ask(dst, std::move(call), std::move(what), [promise](WireValue&& result, std::exception_ptr e) mutable {
    if (e) promise.set_exception(e);
    else promise.set_value(std::move(result));
  });
  return wait(future);
}

void RemoteActors::Impl::set_role(int r, Role role) {
  std::lock_guard lock(mutex);
  if (roles[r] == Role::lost || roles[r] == Role::done) return;
  roles[r] = role;
  update_drivers_done();
}

void RemoteActors::Impl::update_drivers_done() {
  bool done = true;
  for (int r = 0; r < size; ++r)
    if (r != rank && roles[r] == Role::driving) done = false;
  drivers_done = done;
  roles_changed.notify_all();
}

void RemoteActors::Impl::serve() {
  {
    std::lock_guard lock(mutex);
    if (roles[rank] == Role::serving) throw ValueError("serve: rank " + std::to_string(rank) + " already serves");
    roles[rank] = Role::serving;
  }
  broadcast(CallKind::serving);
  detail::ServeLoop loop{this, {}};
  const auto stop = [&] { return !loop.ready.empty() || drivers_done.load(); };
  while (!drivers_done) {
    detail::serve_loop_here = &loop;
    transport.drive(stop, deadline_after(std::chrono::milliseconds(100)));
    detail::serve_loop_here = nullptr;
    // The first ready actor runs here; others at the same time on their own CAF actors.
    for (size_t i = 1; i < loop.ready.size(); ++i) drain_on_executor(loop.ready[i]);
    if (!loop.ready.empty()) {
      auto first = std::move(loop.ready.front());
      loop.ready.clear();
      // The answers to the calls that one read brought go out in one write.
      Transport::SendBatch answers(transport);
      drain(*first);
    }
  }
  // The drivers' last calls (sent before their done notice) run before serve() returns.
  std::unique_lock lock(mutex);
  idle.wait(lock, [&] { return running == 0; });
  if (driver_lost) std::rethrow_exception(driver_lost);
}

void RemoteActors::Impl::close() {
  broadcast(CallKind::done);
  {
    // Other drivers may still call this rank's actors, or look names up in rank 0's directory:
    // calls are answered until each of them is done or lost (or the group's timeout passes).
    std::unique_lock lock(mutex);
    roles_changed.wait_for(lock, group->timeout(), [&] { return drivers_done.load(); });
  }
  transport.set_actor_handler(nullptr);
  std::vector<Pending> cancelled;
  std::vector<std::shared_ptr<Hosted>> actors;
  std::map<std::pair<int, uint64_t>, std::exception_ptr> unreported;
  {
    std::unique_lock lock(mutex);
    for (auto& [id, p] : pending) cancelled.push_back(std::move(p));
    pending.clear();
    for (auto& [id, actor] : hosted) actors.push_back(actor);
    unreported.swap(send_failures);
    send_failure_count.store(0, std::memory_order_release);
  }
  for (Pending& p : cancelled)
    p.answer({}, with_context(p.what, error<CancelledError>("this rank's RemoteActors was closed")));
  // Failures of send()s that no later call or check() threw: here is the last place to see them.
  for (auto& [actor, failed] : unreported)
    std::cerr << "remote actors: rank " << rank << ": never checked: " << encode_error(failed).message << std::endl;
  for (auto& actor : actors) {
    std::lock_guard lock(actor->mutex);
    actor->mailbox.clear();  // what has not started yet never will
  }
  std::unique_lock lock(mutex);
  idle.wait(lock, [&] { return running == 0; });
  hosted.clear();
}

}  // namespace troupe::net
