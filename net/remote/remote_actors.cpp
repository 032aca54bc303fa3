#include <condition_variable>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "actors/module.h"
#include "actors/promise.h"
#include "devices/error_kinds.h"
#include "net/remote/call_frame.h"
#include "net/remote/remote_actor.h"
#include "net/transport.h"

namespace troupe::net {

namespace detail {

// What a RemoteActor handle points at. A restart moves the actor, so rank and id are read under
// the mutex.
struct ActorRef {
  std::weak_ptr<RemoteActors::Impl> node;
  std::string name, type;
  std::mutex mutex;
  int rank = -1;
  uint64_t id = 0;
  bool watched = false;  // the rank that holds this handle hears of the actor's end
  bool down = false;
  std::exception_ptr down_error;  // null: stopped
  std::vector<std::function<void(std::exception_ptr)>> on_down;
  // Supervision, on the rank that spawned it with max_restarts > 0:
  Value arguments;  // the constructor's, for a respawn
  int restarts_left = 0;
  bool restarting = false;
  std::vector<std::function<void()>> held;  // calls made during a restart, made again after it
};

}  // namespace detail

namespace {

using detail::ActorRef;
using detail::Answer;

// A call waiting in a hosted actor's mailbox (a request, a tell, or the stop that ends it).
struct Call {
  CallKind kind = CallKind::request;
  int source = -1;
  uint64_t request = 0;
  std::string method;
  Value arguments;
};

// An actor this rank hosts: the object, its mailbox, and who watches it.
struct Hosted {
  uint64_t id = 0;
  std::string name;
  const ActorType* type = nullptr;
  std::shared_ptr<void> object;          // null once stopped
  std::shared_ptr<ModuleQueue> executor;  // its CAF actor, for calls that no serving thread takes
  std::set<int> watchers;                 // ranks to tell when it stops (under Impl::mutex)
  std::mutex mutex;                       // guards the mailbox
  std::deque<Call> mailbox;
  bool scheduled = false;  // a thread runs (or is about to run) the mailbox
};

// The thread in serve(), while it waits for frames: calls it receives for idle actors run on it.
struct ServeLoop {
  RemoteActors::Impl* node;
  std::vector<std::shared_ptr<Hosted>> ready;
};
thread_local ServeLoop* serve_loop_here = nullptr;

std::string error_text(std::exception_ptr error) { return encode_error(std::move(error)).serialize(); }

template <class E>
std::exception_ptr error(const std::string& message) {
  return std::make_exception_ptr(E(message));
}

}  // namespace

struct RemoteActors::Impl : std::enable_shared_from_this<Impl> {
  explicit Impl(std::shared_ptr<ProcessGroup> world_group)
      : world(std::move(world_group)),
        transport(world->transport()),
        rank(transport.rank()),
        size(transport.world_size()),
        roles(size, Role::driving),
        constructor(troupe::detail::spawn_module_actor("remote actors: constructors")) {}

  enum class Role { driving, serving, done, lost };
  struct Pending {
    int rank;
    std::string what;  // "remote actor 'a' on rank 1: m: ", put before errors raised here
    Answer answer;
  };
  struct Entry {
    int rank;
    uint64_t id;
    std::string type;
  };

  std::shared_ptr<ProcessGroup> world;
  Transport& transport;
  const int rank, size;

  std::mutex mutex;  // guards everything below
  std::unordered_map<uint64_t, std::shared_ptr<Hosted>> hosted;
  uint64_t next_actor = 1;
  std::map<std::string, int> spawned;  // actors of each type spawned here so far: default names
  int running = 0;                     // mailboxes being run and constructors being called
  std::condition_variable idle;
  std::unordered_map<uint64_t, Pending> pending;
  uint64_t next_request = 1;
  std::multimap<std::pair<int, uint64_t>, std::weak_ptr<ActorRef>> watched;  // (rank, id) -> handle
  std::map<std::string, Entry> directory;                                   // rank 0's
  std::vector<Role> roles;
  std::exception_ptr driver_lost;
  std::condition_variable roles_changed;
  std::atomic<bool> drivers_done{false};
  bool closed = false;
  std::shared_ptr<ModuleQueue> constructor;  // spawns run their constructors in order, off the receiving thread

  // --- sending -----------------------------------------------------------------------------------

  // To another rank over the transport; to this rank, handled at once on this thread.
  void post(int dst, CallFrame call) {
    if (dst == rank) return dispatch(rank, std::move(call));
    const EncodedCall wire = encode_call(call);
    transport.send_actor_frame(dst, wire.bytes, wire.tensors);
  }

  // Sends a call whose answer goes to `answer`; errors raised here get `what` in front.
  void ask(int dst, CallFrame call, std::string what, Answer answer) {
    {
      std::lock_guard lock(mutex);
      call.request = next_request++;
      pending.emplace(call.request, Pending{dst, std::move(what), std::move(answer)});
    }
    const uint64_t id = call.request;
    try {
      post(dst, std::move(call));
    } catch (...) {
      fail_pending(id, std::current_exception());
    }
  }

  void fail_pending(uint64_t id, std::exception_ptr e) {
    std::optional<Pending> p = take_pending(id);
    if (p) p->answer({}, with_context(p->what, e));
  }

  std::optional<Pending> take_pending(uint64_t id) {
    std::lock_guard lock(mutex);
    auto it = pending.find(id);
    if (it == pending.end()) return std::nullopt;  // answered already, or failed by a loss
    Pending p = std::move(it->second);
    pending.erase(it);
    return p;
  }

  // Answers a request; the caller's rank may be gone, which nobody needs to hear of.
  void respond(int dst, uint64_t request, Value result, const std::string& what) {
    try {
      post(dst, CallFrame{CallKind::reply, 0, request, "", std::move(result)});
    } catch (const CommError&) {
    } catch (...) {  // the result cannot be encoded
      refuse(dst, request, with_context(what + "result: ", std::current_exception()));
    }
  }

  void refuse(int dst, uint64_t request, std::exception_ptr e) {
    if (request == 0) {
      std::cerr << "remote actors: rank " << rank << ": a call sent by rank " << dst
                << " failed: " << encode_error(e).message << std::endl;
      return;
    }
    try {
      post(dst, CallFrame{CallKind::failure, 0, request, error_text(e), Value()});
    } catch (const CommError&) {
    }
  }

  void broadcast(CallKind kind) {
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      try {
        post(r, CallFrame{kind, 0, 0, "", Value()});
      } catch (const CommError&) {
      }
    }
  }

  // --- receiving ---------------------------------------------------------------------------------

  void on_frame(Message&& m) {
    CallFrame call = decode_call(m.payload.raw_data(), m.payload.nbytes(), m.parts);  // CommError: malformed
    dispatch(m.source, std::move(call));
  }

  void dispatch(int source, CallFrame&& call) {
    try {
      switch (call.kind) {
        case CallKind::request:
        case CallKind::tell:
        case CallKind::stop: return deliver(source, std::move(call));
        case CallKind::reply:
          if (auto p = take_pending(call.request)) p->answer(std::move(call.value), nullptr);
          return;
        case CallKind::failure:
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
    } catch (const std::exception& e) {
      std::cerr << "remote actors: rank " << rank << ": a " << name(call.kind) << " from rank " << source
                << " failed: " << e.what() << std::endl;
    }
  }

  void on_peer_lost(int r, std::exception_ptr why) {
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
    for (Pending& p : failed) p.answer({}, with_context(p.what, why));
    for (auto& ref : ended) actor_down(ref, why);
  }

  // --- hosting -----------------------------------------------------------------------------------

  std::shared_ptr<Hosted> find_hosted(uint64_t id) {
    std::lock_guard lock(mutex);
    auto it = hosted.find(id);
    return it == hosted.end() ? nullptr : it->second;
  }

  void deliver(int source, CallFrame&& call) {
    std::shared_ptr<Hosted> actor = find_hosted(call.actor);
    if (!actor) {
      if (call.kind == CallKind::stop && call.request == 0) return;
      refuse(source, call.request,
             error<ValueError>("remote actor #" + std::to_string(call.actor) + " on rank " + std::to_string(rank) +
                               ": " + call.text + (call.text.empty() ? "" : ": ") +
                               "no such actor (it was stopped, or never spawned here)"));
      return;
    }
    bool start;
    {
      std::lock_guard lock(actor->mutex);
      actor->mailbox.push_back(Call{call.kind, source, call.request, std::move(call.text), std::move(call.value)});
      start = !actor->scheduled;
      actor->scheduled = true;
    }
    if (start) schedule(actor);
  }

  // Runs a mailbox that just got its first call: on the serving thread when it is the one that
  // received it (no hand-off), else on the actor's own CAF actor.
  void schedule(const std::shared_ptr<Hosted>& actor) {
    {
      std::lock_guard lock(mutex);
      ++running;
    }
    if (serve_loop_here && serve_loop_here->node == this) {
      serve_loop_here->ready.push_back(actor);
      return;
    }
    auto run = [self = shared_from_this(), actor] { self->drain(*actor); };
    actor->executor->submit(std::make_shared<troupe::detail::Task<void, decltype(run)>>(std::move(run), actor->executor));
  }

  void drain(Hosted& actor) {
    while (true) {
      Call call;
      {
        std::lock_guard lock(actor.mutex);
        if (actor.mailbox.empty()) {
          actor.scheduled = false;
          break;
        }
        call = std::move(actor.mailbox.front());
        actor.mailbox.pop_front();
      }
      run(actor, call);
    }
    finished_running();
  }

  void finished_running() {
    std::lock_guard lock(mutex);
    if (--running == 0) idle.notify_all();
  }

  std::string where(const Hosted& actor) const {
    return "remote actor '" + actor.name + "' on rank " + std::to_string(rank) + ": ";
  }

  void run(Hosted& actor, Call& call) {
    if (call.kind == CallKind::stop) return end(actor, call);
    const std::string what = where(actor) + call.method + ": ";
    Value result;
    std::exception_ptr failure;
    const ActorType::Method* method = actor.type->method(call.method);
    if (!actor.object) {
      failure = error<ValueError>(what + "the actor was stopped");
    } else if (!method) {
      failure = error<ValueError>(what + "no such method; " + actor.type->name + " has " + actor.type->method_names());
    } else {
      try {
        result = method->call(actor.object.get(), call.arguments);
      } catch (...) {
        failure = with_context(what, std::current_exception());
      }
    }
    if (failure) refuse(call.source, call.request, failure);
    else if (call.request != 0) respond(call.source, call.request, std::move(result), what);
  }

  // A stop, reached in the mailbox after the calls sent before it.
  void end(Hosted& actor, const Call& call) {
    std::set<int> watchers;
    {
      std::lock_guard lock(mutex);
      hosted.erase(actor.id);
      watchers.swap(actor.watchers);
    }
    if (actor.object) {
      actor.object.reset();  // its destructor runs here, in the mailbox's order
      if (rank == 0) withdraw(rank, actor.name);
      else post_quietly(0, CallFrame{CallKind::withdraw, 0, 0, actor.name, Value()});
    }
    if (call.request != 0) respond(call.source, call.request, Value(), where(actor));
    for (int r : watchers) post_quietly(r, CallFrame{CallKind::down, actor.id, 0, "", Value()});
  }

  void post_quietly(int dst, CallFrame call) {
    try {
      post(dst, std::move(call));
    } catch (const CommError&) {
    }
  }

  void add_watcher(int source, uint64_t id) {
    {
      std::lock_guard lock(mutex);
      if (auto it = hosted.find(id); it != hosted.end()) return (void)it->second->watchers.insert(source);
    }
    post_quietly(source, CallFrame{CallKind::down, id, 0,
                                   error_text(error<ValueError>("remote actor #" + std::to_string(id) + " on rank " +
                                                                std::to_string(rank) + ": no such actor")),
                                   Value()});
  }

  // spawn: the constructor runs off the receiving thread, in spawn order; then the name is enrolled
  // in rank 0's directory, and only then is the spawner answered (so a lookup after spawn_on finds it).
  void host_spawn(int source, CallFrame&& call) {
    const ActorType* type = find_actor_type(call.text);
    const uint64_t request = call.request;
    if (!type) {
      refuse(source, request,
             error<ValueError>("spawn_on: rank " + std::to_string(rank) + " has no actor type '" + call.text +
                               "' (registered there: " + actor_type_names() + ")"));
      return;
    }
    Value::List& items = call.value.as_list();
    std::string name = items[0].is_none() ? "" : items[0].as_string();
    const int replaces_rank = items.size() > 2 ? static_cast<int>(items[2].as_int()) : -1;
    const uint64_t replaces_id = items.size() > 3 ? static_cast<uint64_t>(items[3].as_int()) : 0;
    {
      std::lock_guard lock(mutex);
      ++running;
    }
    auto construct = [self = shared_from_this(), type, source, request, name = std::move(name),
                      arguments = std::move(items[1]), replaces_rank, replaces_id]() mutable {
      self->construct(type, source, request, std::move(name), arguments, replaces_rank, replaces_id);
      self->finished_running();
    };
    constructor->submit(std::make_shared<troupe::detail::Task<void, decltype(construct)>>(std::move(construct), constructor));
  }

  void construct(const ActorType* type, int source, uint64_t request, std::string name, const Value& arguments,
                 int replaces_rank, uint64_t replaces_id) {
    const std::string what = "spawn_on: " + type->name + " on rank " + std::to_string(rank) + ": ";
    auto actor = std::make_shared<Hosted>();
    actor->type = type;
    try {
      actor->object = type->construct(arguments);
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
      hosted.emplace(actor->id, actor);
    }
    actor->executor = troupe::detail::spawn_module_actor(actor->name);
    auto enrolled = [self = shared_from_this(), actor, source, request, what](Value&&, std::exception_ptr e) {
      if (e) {
        {
          std::lock_guard lock(self->mutex);
          self->hosted.erase(actor->id);
        }
        self->refuse(source, request, with_context(what, e));
        return;
      }
      self->respond(source, request,
                    Value::list({Value::integer(static_cast<int64_t>(actor->id)), Value::string(actor->name)}), what);
    };
    ask(0,
        CallFrame{CallKind::enroll, actor->id, 0, actor->name,
                  Value::list({Value::string(type->name), Value::integer(replaces_rank),
                               Value::integer(static_cast<int64_t>(replaces_id))})},
        what + "enrolling '" + actor->name + "' with rank 0: ", std::move(enrolled));
  }

  // --- the directory, on rank 0 ------------------------------------------------------------------

  void enroll(int source, const CallFrame& call) {
    const Value::List& items = call.value.as_list();
    if (rank != 0 || items.size() != 3)
      return refuse(source, call.request, error<ValueError>("enroll: rank " + std::to_string(rank) + " keeps no directory"));
    const Entry entry{source, call.actor, items[0].as_string()};
    const int replaces_rank = static_cast<int>(items[1].as_int());
    const auto replaces_id = static_cast<uint64_t>(items[2].as_int());
    std::optional<Entry> holder;
    {
      std::lock_guard lock(mutex);
      auto [it, added] = directory.emplace(call.text, entry);
      // A respawn takes over its predecessor's name even before this rank heard of the loss.
      if (!added && it->second.rank == replaces_rank && it->second.id == replaces_id) {
        it->second = entry;
        added = true;
      }
      if (!added) holder = it->second;
    }
    if (holder)
      return refuse(source, call.request,
                    error<ValueError>("the name '" + call.text + "' is taken (by a " + holder->type + " on rank " +
                                      std::to_string(holder->rank) + ")"));
    respond(source, call.request, Value(), "");
  }

  void withdraw(int source, const std::string& name) {
    std::lock_guard lock(mutex);
    auto it = directory.find(name);
    if (it != directory.end() && it->second.rank == source) directory.erase(it);
  }

  void answer_lookup(int source, const CallFrame& call) {
    std::optional<Entry> found;
    std::string known;
    {
      std::lock_guard lock(mutex);
      if (auto it = directory.find(call.text); it != directory.end()) found = it->second;
      int listed = 0;
      for (auto it = directory.begin(); it != directory.end() && listed < 10; ++it, ++listed)
        known += (known.empty() ? "" : ", ") + it->first;
      if (directory.size() > 10) known += ", ...";
    }
    if (rank != 0) return refuse(source, call.request, error<ValueError>("lookup: rank " + std::to_string(rank) + " keeps no directory"));
    if (!found)
      return refuse(source, call.request,
                    error<ValueError>("lookup: no actor named '" + call.text + "' (rank 0's directory holds " +
                                      (known.empty() ? std::string("none") : known) + ")"));
    respond(source, call.request,
            Value::list({Value::integer(found->rank), Value::integer(static_cast<int64_t>(found->id)),
                         Value::string(found->type)}),
            "");
  }

  // --- handles, watching and supervision ---------------------------------------------------------

  std::shared_ptr<ActorRef> make_ref(std::string name, std::string type, int at, uint64_t id) {
    auto ref = std::make_shared<ActorRef>();
    ref->node = weak_from_this();
    ref->name = std::move(name);
    ref->type = std::move(type);
    ref->rank = at;
    ref->id = id;
    return ref;
  }

  // From now on this rank hears when the actor ends: its rank lost (noticed here) or stopped (the
  // host's down notice).
  void watch(const std::shared_ptr<ActorRef>& ref) {
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
    post_quietly(at, CallFrame{CallKind::monitor, id, 0, "", Value()});
  }

  // The host says the actor stopped (why null) or never existed.
  void actor_ended(int source, uint64_t id, std::exception_ptr why) {
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

  // Its rank was lost: respawned when restarts are left, else down for good.
  void actor_down(const std::shared_ptr<ActorRef>& ref, std::exception_ptr why) {
    int from;
    {
      std::lock_guard lock(ref->mutex);
      if (ref->down || ref->restarting) return;
      if (ref->restarts_left <= 0) {
        from = -1;
      } else {
        --ref->restarts_left;
        ref->restarting = true;
        from = ref->rank;
      }
    }
    if (from < 0) return finish_down(ref, why);
    respawn(ref, from, why);
  }

  void finish_down(const std::shared_ptr<ActorRef>& ref, std::exception_ptr why) {
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
    for (auto& fn : callbacks) fn(why);
  }

  void respawn(const std::shared_ptr<ActorRef>& ref, int from, std::exception_ptr why) {
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
    Value arguments;
    {
      std::lock_guard lock(ref->mutex);
      old_id = ref->id;
      arguments = ref->arguments;
    }
    auto respawned = [self = shared_from_this(), ref, to, why](Value&& result, std::exception_ptr e) {
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
    ask(to,
        CallFrame{CallKind::spawn, 0, 0, ref->type,
                  Value::list({Value::string(ref->name), std::move(arguments), Value::integer(from),
                               Value::integer(static_cast<int64_t>(old_id))})},
        "restarting remote actor '" + ref->name + "' on rank " + std::to_string(to) + ": ", std::move(respawned));
  }

  // --- calls from this rank ----------------------------------------------------------------------

  void call(const std::shared_ptr<ActorRef>& ref, std::string_view method, Value arguments, Answer answer) {
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

  static std::string describe(const std::string& name, int at, std::string_view method) {
    return "remote actor '" + name + "' on rank " + std::to_string(at) + ": " + std::string(method) + ": ";
  }

  // Waits for an answer to a call made here.
  Value ask_and_wait(int dst, CallFrame call, std::string what) {
    Promise<Value> promise;
    Future<Value> future = promise.future();
    ask(dst, std::move(call), std::move(what), [promise](Value&& result, std::exception_ptr e) mutable {
      if (e) promise.set_exception(e);
      else promise.set_value(std::move(result));
    });
    return wait(future);
  }

  // --- drivers and servers -----------------------------------------------------------------------

  void set_role(int r, Role role) {
    std::lock_guard lock(mutex);
    if (roles[r] == Role::lost || roles[r] == Role::done) return;
    roles[r] = role;
    update_drivers_done();
  }

  // With mutex held.
  void update_drivers_done() {
    bool done = true;
    for (int r = 0; r < size; ++r)
      if (r != rank && roles[r] == Role::driving) done = false;
    drivers_done = done;
    roles_changed.notify_all();
  }

  void serve() {
    {
      std::lock_guard lock(mutex);
      if (roles[rank] == Role::serving) throw ValueError("serve: rank " + std::to_string(rank) + " already serves");
      roles[rank] = Role::serving;
    }
    broadcast(CallKind::serving);
    ServeLoop loop{this, {}};
    const auto stop = [&] { return !loop.ready.empty() || drivers_done.load(); };
    while (!drivers_done) {
      serve_loop_here = &loop;
      transport.drive(stop, deadline_after(std::chrono::milliseconds(100)));
      serve_loop_here = nullptr;
      // The first ready actor runs here; others at the same time on their own CAF actors.
      for (size_t i = 0; i < loop.ready.size(); ++i) {
        if (i == 0) continue;
        auto run = [self = shared_from_this(), actor = loop.ready[i]] { self->drain(*actor); };
        loop.ready[i]->executor->submit(
            std::make_shared<troupe::detail::Task<void, decltype(run)>>(std::move(run), loop.ready[i]->executor));
      }
      if (!loop.ready.empty()) {
        auto first = std::move(loop.ready.front());
        loop.ready.clear();
        drain(*first);
      }
    }
    // The drivers' last calls (sent before their done notice) run before serve() returns.
    std::unique_lock lock(mutex);
    idle.wait(lock, [&] { return running == 0; });
    if (driver_lost) std::rethrow_exception(driver_lost);
  }

  void close() {
    broadcast(CallKind::done);
    transport.set_actor_handler(nullptr);
    std::vector<Pending> cancelled;
    std::vector<std::shared_ptr<Hosted>> actors;
    {
      std::unique_lock lock(mutex);
      closed = true;
      for (auto& [id, p] : pending) cancelled.push_back(std::move(p));
      pending.clear();
      for (auto& [id, actor] : hosted) actors.push_back(actor);
    }
    for (Pending& p : cancelled)
      p.answer({}, with_context(p.what, error<CancelledError>("this rank's RemoteActors was closed")));
    for (auto& actor : actors) {
      std::lock_guard lock(actor->mutex);
      actor->mailbox.clear();  // what has not started yet never will
    }
    std::unique_lock lock(mutex);
    idle.wait(lock, [&] { return running == 0; });
    hosted.clear();
  }
};

namespace {

std::mutex current_mutex;
std::shared_ptr<RemoteActors::Impl> current_node;

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
  impl_ = std::make_shared<Impl>(std::move(world));
  {
    std::lock_guard lock(current_mutex);
    if (current_node) throw ValueError("RemoteActors: this process has one already; one at a time");
    current_node = impl_;
  }
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
  impl_->close();
  std::lock_guard lock(current_mutex);
  if (current_node == impl_) current_node.reset();
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
  node->ask_and_wait(at, CallFrame{CallKind::stop, id, 0, "", Value()}, RemoteActors::Impl::describe(ref_->name, at, "stop"));
  node->finish_down(ref_, nullptr);
}

RemoteActor lookup(std::string_view name, std::chrono::milliseconds wait_for) {
  auto node = current("lookup");
  const Deadline deadline = deadline_after(wait_for);
  while (true) {
    try {
      Value found = node->ask_and_wait(0, CallFrame{CallKind::lookup, 0, 0, std::string(name), Value()},
                                       "lookup('" + std::string(name) + "'): ");
      const Value::List& items = found.as_list();
      return RemoteActor(node->make_ref(std::string(name), items.at(2).as_string(), static_cast<int>(items.at(0).as_int()),
                                        static_cast<uint64_t>(items.at(1).as_int())));
    } catch (const ValueError&) {
      if (Clock::now() >= deadline) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

void serve() { current("serve")->serve(); }

namespace detail {

RemoteActor spawn(const SpawnOptions& options, std::string_view type, Value arguments) {
  auto node = current("spawn_on");
  if (options.rank < 0 || options.rank >= node->size)
    throw IndexError("spawn_on: rank " + std::to_string(options.rank) + " outside a world of " +
                     std::to_string(node->size));
  if (options.max_restarts < 0) throw ValueError("spawn_on: max_restarts must be >= 0");
  Value name = options.name.empty() ? Value() : Value::string(options.name);
  Value answer = node->ask_and_wait(
      options.rank,
      CallFrame{CallKind::spawn, 0, 0, std::string(type), Value::list({name, arguments, Value::integer(-1), Value::integer(0)})},
      "spawn_on: " + std::string(type) + " on rank " + std::to_string(options.rank) + ": ");
  const Value::List& items = answer.as_list();
  auto ref = node->make_ref(items.at(1).as_string(), std::string(type), options.rank,
                            static_cast<uint64_t>(items.at(0).as_int()));
  if (options.max_restarts > 0) {
    ref->arguments = std::move(arguments);
    ref->restarts_left = options.max_restarts;
    node->watch(ref);
  }
  return RemoteActor(ref);
}

void call(const std::shared_ptr<ActorRef>& actor, std::string_view method, Value arguments, Answer answer) {
  if (!actor) throw ValueError("RemoteActor: the handle is empty");
  auto node = actor->node.lock();
  if (!node) throw ValueError("remote actor '" + actor->name + "': this rank's RemoteActors is gone");
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

std::string describe_call(const std::shared_ptr<ActorRef>& actor, std::string_view method) {
  std::lock_guard lock(actor->mutex);
  return RemoteActors::Impl::describe(actor->name, actor->rank, method);
}

}  // namespace detail
}  // namespace troupe::net
