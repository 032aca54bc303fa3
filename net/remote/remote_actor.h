#pragma once
// Remote actors: actors living on any rank of a job, spawned, named, called and supervised from
// every other rank, with tensors as zero-copy payloads.
//
//   TROUPE_ACTOR(Stage(const Config&), "xlmr.stage", &Stage::forward);  // once, in a .cpp
//
//   auto world = net::init_process_group();
//   net::RemoteActors actors(world);                       // this rank hosts, calls and looks up
//   if (world->rank() == 0) {                              // the driver
//     RemoteActor s1 = spawn_on(1, "xlmr.stage", config);  // Stage(config) runs on rank 1
//     Future<WireValue> f = s1.request("forward", x);      // request/response
//     Tensor y = wait(f);                                  // (or s1.request<Tensor>(...))
//     s1.send("forward", x);                               // fire and forget
//     RemoteActor same = lookup("xlmr.stage/1");           // names, not handles
//   } else {
//     serve();                                             // host calls until the driver is done
//   }
//
//   auto tally = std::make_shared<Tally>();                // an object this rank already has,
//   RemoteActor t = host("app.tally/" + std::to_string(world->rank()), tally,  // called by name
//                        Method{"add", &Tally::add}, Method{"total", &Tally::total});
//
// Semantics
// - Names: spawn_on calls an actor "<type>/<rank>", then "<type>/<rank>.1", ... on that rank,
//   unless SpawnOptions::name says otherwise. Names are unique in the job: rank 0 keeps the
//   directory (name -> rank, actor id), so rank 0 must live as long as the job; lookup() asks it.
// - Mailbox: an actor's calls run one at a time, in the order they arrive; calls from one rank
//   arrive in the order they were made. A call runs on the thread in serve() when that thread
//   received it and is free (no hand-off), else on the actor's own CAF actor, so every rank can
//   host actors while it also drives. An actor that waits for a call to itself (directly or
//   around a cycle of actors) waits forever, as in Erlang.
// - Waiting: the thread that waits for a request's future receives the answer itself when no
//   other thread is receiving (no hand-off through the transport's I/O thread).
// - Values: arguments and results go through their Codecs (net/remote/value.h): each tensor as a
//   message part of its own, sent from and received into its own bytes (up to 4 KiB copied into
//   the ZeroMQ message, as every small payload is); scalars, strings, lists, optionals, tuples and
//   TROUPE_FIELDS structs in a small tagged encoding. See call_frame.h.
// - Errors: a handler's exception comes back as the same type (devices/error_kinds.h), its message
//   naming the actor, the method and the rank; so do an unknown type, method or name, wrong
//   arguments, and a result of the wrong type. A send() that fails on its host comes back to the
//   sending rank, as CUDA's asynchronous errors do: that rank keeps the first one per actor, and
//   the next request() or send() to that actor from that rank throws it, once, instead of being
//   made; check() throws it without a call. It arrives when the host has run the send (before the
//   answer to any request sent after it). One never thrown is printed when RemoteActors closes;
//   the host prints it instead when the sender is gone (nobody else can hear of it).
// - Supervision: when an actor's rank is lost, every pending request to it fails with
//   PeerLostError within 5 s naming the actor and the rank, while the other ranks' actors go on.
//   on_down() hears of it, and of stop(); its callback runs on a transport thread (keep it short,
//   wait for nothing there). An actor spawned with max_restarts > 0 is respawned from its
//   constructor arguments on the next live rank by the rank that spawned it, under the same name;
//   calls made meanwhile wait for the new one; on_down fires once the restarts are spent.
// - State: a type with TROUPE_STATE (actor_type.h) spawned with max_restarts > 0 comes back with
//   the state of its last snapshot (taken every SpawnOptions::snapshot_every calls, or by
//   snapshot()), kept on the spawning rank: the constructor runs, then the state is restored. The
//   calls made through the spawning handle since the snapshot run again, in order, up to the first
//   one that changed the state and is not net::replayable; calls in flight that are not run again
//   fail with PeerLostError. Calls from other handles (lookup) are in a snapshot taken after them,
//   never replayed.
// - Shutdown: destroying RemoteActors cancels this rank's pending requests (CancelledError),
//   drops calls not yet started and waits for the running ones.
// - Hosting: host() turns an object this rank already holds into one of its actors, under a name
//   (unique in the job, else ValueError), answering the methods listed: no registered type, no
//   constructor arguments. Its calls run in its mailbox as a spawned actor's do; the actor holds
//   the object until it is stopped (or RemoteActors is destroyed). type() is empty for it.
// - One per process: the program makes RemoteActors on every rank, before anything that calls
//   remote actors and destroyed after it. A library that needs them on a process group (the
//   dataflow executor, dataflow/executor.h) calls RemoteActors::ensure(group): the program's, or,
//   when the program has none, one made on the group's transport and shared by such libraries
//   until the last lets go (a RemoteActors the program makes meanwhile is a ValueError).
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "actors/future.h"
#include "net/process_group.h"
#include "net/remote/actor_type.h"
#include "net/remote/value.h"

namespace troupe::net {

class RemoteActor;

namespace detail {
struct ActorRef;
// The continuation of a request: the result, or the error (already naming actor, method, rank).
using Answer = std::function<void(WireValue&& result, std::exception_ptr error)>;
void call(const std::shared_ptr<ActorRef>& actor, std::string_view method, WireValue arguments, Answer answer);
// The current exception (a result that did not decode) as the same type, its message naming the
// call: "remote actor 'a' on rank 1: m: result: ...".
std::exception_ptr result_error(const std::shared_ptr<ActorRef>& actor, std::string_view method);
// Receives for a while on the waiting thread, when no other thread does (see ReplyState).
bool receive_for(ActorRef& actor, const troupe::detail::TaskBase& reply);
// The same for an answer that may come from any rank (an actor mesh's).
bool receive_here(const troupe::detail::TaskBase& reply);

// The state behind a request's future, completed by the answer. A thread that waits for it
// receives from the transport itself meanwhile, so the answer wakes no other thread first. Without
// an actor (an actor mesh's call), the answers may come from any rank.
template <class T>
class ReplyState final : public troupe::detail::TaskResult<T> {
 public:
  explicit ReplyState(std::shared_ptr<ActorRef> actor = nullptr)
      : troupe::detail::TaskResult<T>(troupe::detail::TaskBase::External{}), actor_(std::move(actor)) {}
  template <class... V>
  void set_value(V&&... value) {
    if constexpr (!std::is_void_v<T>) this->value_.emplace(std::forward<V>(value)...);
    this->finish(nullptr);
  }
  void set_exception(std::exception_ptr error) { this->finish(std::move(error)); }

 private:
  void execute() override {}
  bool help_complete() override { return actor_ ? receive_for(*actor_, *this) : receive_here(*this); }
  std::shared_ptr<ActorRef> actor_;
};
}  // namespace detail

struct SpawnOptions {
  int rank = 0;
  std::string name;      // empty: "<type>/<rank>" (then "<type>/<rank>.1", ...)
  int max_restarts = 0;  // respawns on another live rank after its rank is lost
  // cuda:N: the actor owns a lane there (devices/lane.h): its state moves there once (T::to(Device),
  // where T has one) and its calls queue their kernels on the lane, waiting on the device for the
  // work that wrote their tensor arguments on that rank.
  Device device = Device::cpu();
  // A type with TROUPE_STATE and max_restarts > 0 comes back with its state: this rank keeps its
  // last snapshot and the calls made through the handle since, and a respawn restores the one and
  // replays the other (see "State"). A snapshot is taken after this many calls through the
  // handle that change the state (non-const methods); 0: only when RemoteActor::snapshot() asks.
  int snapshot_every = 0;
};

// This rank's part in the job's remote actors: it hosts actors spawned here, answers the calls to
// them, and lets this rank spawn, call and look up actors anywhere. One per process; the free
// functions below use it. Destroying it tells the other ranks this one is done.
class RemoteActors {
 public:
  explicit RemoteActors(std::shared_ptr<ProcessGroup> world);
  ~RemoteActors();
  RemoteActors(const RemoteActors&) = delete;
  RemoteActors& operator=(const RemoteActors&) = delete;

  // For a library that needs remote actors on `group` (any group of the job): null when this
  // process has a RemoteActors (the program's, which must then outlive the library's use), else
  // one made on the group's transport, the same for every caller while one of them holds it.
  //   std::shared_ptr<RemoteActors> mine = RemoteActors::ensure(group);  // keep it while in use
  static std::shared_ptr<RemoteActors> ensure(const std::shared_ptr<ProcessGroup>& group);

  struct Impl;

 private:
  RemoteActors() = default;
  // Becomes this process's RemoteActors (ValueError when it has one), made by ensure() or not.
  void open(std::shared_ptr<ProcessGroup> group, bool shared);

  std::shared_ptr<Impl> impl_;
};

class RemoteActor {
 public:
  RemoteActor() = default;
  explicit RemoteActor(std::shared_ptr<detail::ActorRef> ref) : ref_(std::move(ref)) {}

  bool valid() const { return ref_ != nullptr; }
  const std::string& name() const;
  const std::string& type() const;  // empty for a hosted object
  int rank() const;  // where it lives now

  // Calls `method` with the arguments; the future holds its result decoded as R (WireValue: as it
  // came) or rethrows its error.
  template <class R = WireValue, class... Args>
  Future<R> request(std::string_view method, const Args&... args) const;
  // Queues the call and returns; nothing comes back, but a failure on the host (see "Errors").
  template <class... Args>
  void send(std::string_view method, const Args&... args) const {
    detail::call(ref_, method, detail::list_of(args...), nullptr);
  }
  // The call with its arguments already encoded as one list (code that forwards calls: actor
  // meshes' relays); the answer goes to `answer` on the thread that receives it (keep it short),
  // or nowhere when it is null (a send()).
  void request_encoded(std::string_view method, WireValue arguments, detail::Answer answer) const {
    detail::call(ref_, method, std::move(arguments), std::move(answer));
  }
  // Calls fn(why) once when the actor is down for good: stopped (why is null) or its rank lost.
  void on_down(std::function<void(std::exception_ptr why)> fn) const;
  // Throws the kept failure of an earlier send() to this actor from this rank (once), if there is
  // one that has reached this rank; else returns.
  //   a.send("append", 1); ...; a.check();  // the append's failure, as the same type
  void check() const;
  // Stops the actor after the calls sent before have run, and waits for that.
  void stop() const;
  // Takes a snapshot of a supervised actor's state (TROUPE_STATE) after the calls made before
  // through this handle, and waits until this rank keeps it. ValueError for another actor.
  void snapshot() const;

 private:
  std::shared_ptr<detail::ActorRef> ref_;
};

// Spawns an actor of a registered type (actor_type.h) on a rank, from constructor arguments;
// returns once it is constructed. The constructor's exception comes back as the same type.
template <class... Args>
RemoteActor spawn_on(const SpawnOptions& options, std::string_view type, const Args&... args);
template <class... Args>
RemoteActor spawn_on(int rank, std::string_view type, const Args&... args) {
  SpawnOptions options;
  options.rank = rank;
  return spawn_on(options, type, args...);
}

// One method of a hosted object, by the name its callers use: Method{"add", &Tally::add}.
template <class M>
struct Method {
  std::string_view name;
  M member;
};
template <class M>
Method(const char*, M) -> Method<M>;

// Hosts an object this rank holds as the actor `name`, answering `methods` (see "Hosting");
// returns once rank 0's directory has the name. ValueError when it is taken.
template <class T, class... M>
RemoteActor host(std::string_view name, std::shared_ptr<T> object, const Method<M>&... methods);

// The actor called `name`. Not there yet: waits up to `wait` for it to appear, then ValueError.
RemoteActor lookup(std::string_view name, std::chrono::milliseconds wait = std::chrono::milliseconds(0));

// This rank, and the number of ranks in the job, as this process's RemoteActors knows them
// (ValueError when it has none).
int actors_rank();
int actors_world_size();

// Hosts this rank's actors on the calling thread until every rank that drives (does not serve)
// is done. Throws PeerLostError when a driving rank is lost first.
void serve();

namespace detail {
RemoteActor spawn(const SpawnOptions& options, std::string_view type, WireValue arguments);
RemoteActor host(std::string_view name, std::shared_ptr<void> object, std::shared_ptr<const ActorType> methods);
}  // namespace detail

template <class T, class... M>
RemoteActor host(std::string_view name, std::shared_ptr<T> object, const Method<M>&... methods) {
  static_assert((std::is_base_of_v<typename detail::MethodOf<M>::object, T> && ...),
                "host: every method must be a member of the object's class");
  auto type = std::make_shared<ActorType>();
  (type->methods.push_back(detail::bind_method<T>(std::string(methods.name), methods.member)), ...);
  return detail::host(name, std::move(object), std::move(type));
}

template <class... Args>
RemoteActor spawn_on(const SpawnOptions& options, std::string_view type, const Args&... args) {
  return detail::spawn(options, type, detail::list_of(args...));
}

template <class R, class... Args>
Future<R> RemoteActor::request(std::string_view method, const Args&... args) const {
  auto reply = std::make_shared<detail::ReplyState<R>>(ref_);
  detail::call(ref_, method, detail::list_of(args...),
               [reply, actor = ref_, method = std::string(method)](WireValue&& result, std::exception_ptr error) {
                 if (error) return reply->set_exception(error);
                 if constexpr (std::is_void_v<R>) {
                   reply->set_value();
                 } else {
                   try {
                     reply->set_value(Codec<R>::decode(result));
                   } catch (...) {
                     reply->set_exception(detail::result_error(actor, method));
                   }
                 }
               });
  return Future<R>(std::move(reply));
}

}  // namespace troupe::net
