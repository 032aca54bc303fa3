#pragma once
// The endpoint behind RemoteActors (internal to net/remote/), one per rank: it sends and receives
// call frames, hosts this rank's actors (hosting.cpp), keeps rank 0's directory (directory.cpp),
// watches and restarts actors (supervision.cpp), keeps supervised actors' state and calls for a
// respawn (kept_state.cpp), and runs serve().
//
// Threads: frames are handled on whichever thread drains the transport's ROUTER (the I/O thread,
// the thread in serve(), or a thread waiting for an answer), and those handlers never block. A
// mailbox runs on the thread in serve() or on its actor's CAF actor; constructors run on one CAF
// actor, in spawn order.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>

#include "actors/module_queue.h"
#include "devices/lane.h"
#include "devices/error_kinds.h"
#include "net/remote/call_frame.h"
#include "net/remote/remote_actor.h"
#include "net/transport.h"

namespace troupe::net {

namespace detail {

// A request for a snapshot of an actor's state (TROUPE_STATE): a method no C++ member can be named.
inline constexpr const char* kSnapshotMethod = "troupe.snapshot";

// A call made through the handle of a supervised actor with state, kept on that rank until a
// snapshot taken after it covers it: the respawned actor gets it again when it is replayable.
struct LoggedCall {
  std::string method;
  WireValue arguments;
  bool request = false;  // else a tell
  Answer answer;         // the caller's, until it is answered (null for a tell)
  bool awaited = false;  // a request whose answer has not come
  bool sent = false;     // false: made while the actor was being respawned
  bool replayable = false;
  bool changes_state = true;  // false: a const method, or a snapshot
  bool covered = false;       // a snapshot taken after it holds its effect
  uint32_t attempt = 0;       // answers to an earlier send of it are stale
};

// Kept by the supervising rank for an actor whose type declares TROUPE_STATE.
struct KeptState {
  const ActorType* type;     // registered on this rank: which methods are replayable, or const
  int snapshot_every = 0;    // a snapshot after so many state-changing calls; 0: when asked
  int calls = 0;             // state-changing calls since the last snapshot was asked for
  std::optional<WireValue> state;                // the last snapshot; none yet: the constructor's
  std::map<uint64_t, LoggedCall> log;        // by the order the calls were made
  uint64_t next_call = 1;
  // A call is logged and sent under it, so the log's order is the wire's. Recursive: a caller's
  // answer that fails at once runs on this thread, and may call the actor again.
  std::recursive_mutex sending;
};

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
  WireValue arguments;  // the constructor's, for a respawn
  std::string device = "cpu";  // where it runs, for a respawn
  int restarts_left = 0;
  bool restarting = false;
  std::vector<std::function<void()>> held;  // calls made during a restart, made again after it
  std::unique_ptr<KeptState> kept;  // a type with TROUPE_STATE: snapshots and the calls since
};

// A call waiting in a hosted actor's mailbox (a request, a tell, or the stop that ends it): the
// call frame as decode_call made it (text: the method, value: the arguments, their tensors views
// of the bytes that came), moved in whole, and the rank that sent it.
struct QueuedCall {
  int source = -1;
  CallFrame call;
};

// An actor this rank hosts: the object, its mailbox, and who watches it.
struct Hosted {
  uint64_t id = 0;
  std::string name;
  std::shared_ptr<const ActorType> type;  // registered (not owned), or a hosted object's methods
  std::shared_ptr<void> object;           // null once stopped
  std::shared_ptr<ModuleQueue> executor;  // its CAF actor, for calls that no serving thread takes
  std::shared_ptr<troupe::Lane> lane;     // spawned on a device: its calls queue there
  std::set<int> watchers;                 // ranks to tell when it stops (under Impl::mutex)
  std::mutex mutex;                       // guards the mailbox
  std::deque<QueuedCall> mailbox;
  bool scheduled = false;  // a thread runs (or is about to run) the mailbox
  std::unique_ptr<metrics::ActorMetrics> metrics;  // set with the name, before any call arrives
};

// The thread in serve(), while it waits for frames: calls it receives for idle actors run on it.
struct ServeLoop {
  RemoteActors::Impl* node;
  std::vector<std::shared_ptr<Hosted>> ready;
};
extern thread_local ServeLoop* serve_loop_here;

inline std::string error_text(std::exception_ptr error) { return encode_error(std::move(error)).serialize(); }

template <class E>
inline std::exception_ptr error(const std::string& message) {
  return std::make_exception_ptr(E(message));
}

}  // namespace detail

struct RemoteActors::Impl : std::enable_shared_from_this<Impl> {
  using ActorRef = detail::ActorRef;
  using Answer = detail::Answer;
  using QueuedCall = detail::QueuedCall;
  using Hosted = detail::Hosted;

  // Any group of the job: its transport (every rank's) and its timeout are what is used.
  explicit Impl(std::shared_ptr<ProcessGroup> made_on);

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

  std::shared_ptr<ProcessGroup> group;
  Transport& transport;
  const int rank, size;
  // The n-th RemoteActors on this transport (from 1; Transport::open_actor_generation). Frames say
  // their sender's: one from an earlier one is dropped, one from a later one kept by the transport
  // for the next (executors made one after another each open and close one, and a quicker rank's
  // next one may call before this closed). Set by RemoteActors::open once it is the process's,
  // before any frame.
  uint32_t generation = 0;

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
  std::shared_ptr<ModuleQueue> constructor;  // spawns run their constructors in order, off the receiving thread
  // The first failure of a send() from this rank to each actor, (rank, id), that no call or
  // check() has thrown yet.
  std::map<std::pair<int, uint64_t>, std::exception_ptr> send_failures;
  std::atomic<size_t> send_failure_count{0};  // send_failures.size(), read without the lock by every call

  // --- sending, receiving, calls from this rank, serving and closing (endpoint.cpp) ----------
  // To another rank over the transport; to this rank, handled at once on this thread.
  void post(int dst, CallFrame call, bool awaits_answer = false);
  // Sends a call whose answer goes to `answer`; errors raised here get `what` in front.
  void ask(int dst, CallFrame call, std::string what, Answer answer);
  void fail_pending(uint64_t id, std::exception_ptr e);
  std::optional<Pending> take_pending(uint64_t id);
  // Answers a request; the caller's rank may be gone, which nobody needs to hear of.
  void respond(int dst, uint64_t request, WireValue result, const std::string& what);
  // Sends a call's failure to its caller: a request's to its answer; a send()'s (request 0) to
  // the sender's kept failures of `actor` (send_failed). Printed here when nobody can hear it.
  void refuse(int dst, uint64_t request, std::exception_ptr e, uint64_t actor = 0);
  // A send() from this rank to the actor `actor` on rank `at` failed there: kept, when it is the
  // first unreported one, until take_send_failure().
  void send_failed(int at, uint64_t actor, std::exception_ptr why);
  // The kept failure of a send() to the actor, taken (null when none).
  std::exception_ptr take_send_failure(ActorRef& ref);
  void post_quietly(int dst, CallFrame call);
  void broadcast(CallKind kind);
  void on_frame(Message&& m);
  void dispatch(int source, CallFrame&& call);
  void on_peer_lost(int r, std::exception_ptr why);
  void call(const std::shared_ptr<ActorRef>& ref, std::string_view method, WireValue arguments, Answer answer);
  // Waits for an answer to a call made here.
  WireValue ask_and_wait(int dst, CallFrame call, std::string what);
  void set_role(int r, Role role);
  // With mutex held.
  void update_drivers_done();
  void serve();
  void close();

  // --- this rank's actors: mailboxes and spawns (hosting.cpp) --------------------------------
  std::shared_ptr<Hosted> find_hosted(uint64_t id);
  void deliver(int source, CallFrame&& call);
  // Runs a mailbox that just got its first call: on the serving thread when it is the one that
  // received it (no hand-off), else on the actor's own CAF actor.
  void schedule(const std::shared_ptr<Hosted>& actor);
  void drain_on_executor(const std::shared_ptr<Hosted>& actor);
  // Runs the mailbox's calls until it is empty.
  void drain(Hosted& actor);
  void finished_running();
  std::string where(const Hosted& actor) const;
  void run(Hosted& actor, QueuedCall& queued);
  // A stop, reached in the mailbox after the calls sent before it.
  void end(Hosted& actor, const QueuedCall& stop);
  void add_watcher(int source, uint64_t id);
  // spawn: the constructor runs off the receiving thread, in spawn order; then the name is enrolled
  // in rank 0's directory, and only then is the spawner answered (so a lookup after spawn_on finds it).
  void host_spawn(int source, CallFrame&& call);
  // A respawn brings the state of the last snapshot (restored after the constructor ran).
  void construct(const ActorType* type, int source, uint64_t request, std::string name, const WireValue& arguments,
                 const std::optional<WireValue>& state, Device device, int replaces_rank, uint64_t replaces_id);
  // host(): the object joins this rank's actors, then its name is enrolled in rank 0's directory
  // (waiting for that); a name taken there undoes it.
  std::shared_ptr<ActorRef> host_object(std::string name, std::shared_ptr<void> object,
                                        std::shared_ptr<const ActorType> methods);

  // --- rank 0's directory of names (directory.cpp) -------------------------------------------
  void enroll(int source, const CallFrame& call);
  void withdraw(int source, const std::string& name);
  void answer_lookup(int source, const CallFrame& call);

  // --- handles, watching and restarts (supervision.cpp) --------------------------------------
  std::shared_ptr<ActorRef> make_ref(std::string name, std::string type, int at, uint64_t id);
  // From now on this rank hears when the actor ends: its rank lost (noticed here) or stopped (the
  // host's down notice).
  void watch(const std::shared_ptr<ActorRef>& ref);
  // The host says the actor stopped (why null) or never existed.
  void actor_ended(int source, uint64_t id, std::exception_ptr why);
  // Its rank was lost: respawned when restarts are left, else down for good.
  void actor_down(const std::shared_ptr<ActorRef>& ref, std::exception_ptr why);
  // actor_down in two steps, so that every actor of a lost rank holds its calls before the first
  // is respawned: the rank it restarts from (a restart used, calls held from now on), or:
  static constexpr int kRestartsSpent = -1;  // none left: finish_down
  static constexpr int kNoRestart = -2;      // down or restarting already: nothing to do
  int claim_restart(const std::shared_ptr<ActorRef>& ref);
  void restart_claimed(const std::shared_ptr<ActorRef>& ref, int from, std::exception_ptr why);
  void finish_down(const std::shared_ptr<ActorRef>& ref, std::exception_ptr why);
  void respawn(const std::shared_ptr<ActorRef>& ref, int from, std::exception_ptr why);

  // --- supervised actors' state: the call log, snapshots, replay (kept_state.cpp) ---------------
  // A call through the handle of an actor with kept state: logged, then sent (or, during a
  // respawn, sent by replay() once the new actor has its state). kSnapshotMethod asks for a
  // snapshot in the mailbox's order: its answer (none) comes once this rank holds it.
  void call_kept(const std::shared_ptr<ActorRef>& ref, std::string_view method, WireValue arguments, Answer answer);
  // The respawned actor at (to, id): the calls since the snapshot go again, those replayable (and
  // those made during the respawn); in-flight ones that cannot fail with PeerLostError.
  void replay(const std::shared_ptr<ActorRef>& ref, int to, uint64_t id);
  // The actor is down for good: the calls still waiting for an answer fail with `why`.
  void fail_kept(const std::shared_ptr<ActorRef>& ref, std::exception_ptr why);

  // "remote actor 'a' on rank 1: m: ", what errors about a call start with.
  static std::string describe(const std::string& name, int at, std::string_view method) {
    return "remote actor '" + name + "' on rank " + std::to_string(at) + ": " + std::string(method) + ": ";
  }
};

// This process's RemoteActors (ValueError naming `what` when it has none): for the actor meshes'
// relays and callers (mesh_tree.cpp, mesh_call.cpp), which answer and await calls of their own.
std::shared_ptr<RemoteActors::Impl> this_node(const char* what);

}  // namespace troupe::net
