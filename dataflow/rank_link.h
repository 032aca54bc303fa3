#pragma once
// RankLink: an executor's side of the other ranks (executor.h, "Ranks"). Each rank's part of an
// executor is a remote actor (net/remote/remote_actor.h): this object, hosted on its rank as
// "troupe.dataflow/<group id>.<n>/<rank>" (the n-th executor on this group object: every rank
// makes the same ones in the same order), whose methods are the messages between the parts. A peer's part is
// called with send(), and calls from one rank to a part run in the order they were made, which
// is all the protocol needs: rank 0's start and values reach a rank in order, and a rank's values
// reach rank 0 before its ack. The messages, per invocation: a value crosses to a rank as one
// Edge, whatever the number of its readers there; rank 0 starts the invocation on the ranks that
// run some of its nodes, with its first Edge to each (or a start, to a rank it sends no value);
// the others hear nothing of it; each started rank acks to rank 0 when it is done.
// The link knows every invocation a message may name: rank 0's from run(), the others' made when
// their first message arrives. When a peer's rank is lost (on_down), all of them fail with that
// error, unless the link heals (every node pure) and the lost rank is not 0: then rank 0's healer
// moves the lost rank's nodes to the survivors (a "replace" to each, answered once it took the
// new placement; messages of invocations older than the replace are dropped there), and runs
// every invocation that was in flight again, as new ones. Internal to the executor.
//
//   link->start(inv.id, {2});                                      // rank 0: rank 2 gets no Edge from it
//   link->send_edge(1, Edge{inv.id, {{4, 0}, {5, 1}}, x, true});  // x for node 4 input 0, node 5 input 1
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dataflow/invocation_state.h"
#include "dataflow/plan.h"
#include "net/process_group.h"
#include "net/remote/remote_actor.h"
#include "net/work.h"

namespace troupe::net {

// A Target travels as [node, slot].
template <>
struct Codec<Target> {
  static WireValue encode(const Target& t) { return to_value(std::pair(t.node, t.slot)); }
  static Target decode(const WireValue& v) {
    auto [node, slot] = v.as<std::pair<int, int>>();
    return {node, slot};
  }
};

}  // namespace troupe::net

namespace troupe::detail {

// A dataflow edge to one rank, as one message: the value of one output in one invocation, for
// every input it feeds on that rank (plan node -1: graph output `slot`, rank 0 only). No value:
// a dead token (its branch was not taken), which skips those readers. `start`: rank 0's first
// message of the invocation to that rank, which starts it there.
struct Edge {
  uint64_t invocation = 0;
  std::vector<Target> targets;
  std::optional<Tensor> value;
  bool start = false;
  TROUPE_FIELDS(invocation, targets, value, start)
};

class RankLink : public std::enable_shared_from_this<RankLink> {
 public:
  // What the executor does with what arrives. The link holds it weakly: once the executor is gone,
  // what still arrives is dropped.
  class Scheduler {
   public:
    virtual ~Scheduler() = default;
    // Another rank's state of an invocation rank 0 started (acks: 0).
    virtual InvocationPtr make_invocation(uint64_t id, int acks) = 0;
    // Gives this rank's nodes the constants and starts its nodes without inputs.
    virtual void launch_local(const InvocationPtr& inv) = 0;
    // A value (none: a dead token) for these inputs of plan nodes here (node -1: a graph output);
    // CommError, before any is delivered, when the plan has one of them on another rank.
    virtual void deliver_local(const InvocationPtr& inv, const std::vector<Target>& targets,
                               std::optional<Tensor> value) = 0;
    virtual void node_done(const InvocationPtr& inv) = 0;
    virtual void complete(const InvocationPtr& inv) = 0;
    // Rank 0's executor went away, or this link broke: serve() returns.
    virtual void driver_gone() = 0;

    // Healing. The ranks per plan node with the `lost` ranks' nodes moved to survivors (rank 0).
    virtual std::vector<int> placement_without(const std::vector<uint8_t>& lost) = 0;
    // New invocations run with these ranks per plan node; this rank makes the nodes it gains.
    // CommError when they do not fit the plan.
    virtual void adopt(const std::vector<int>& ranks) = 0;
    // Rank 0: while the lock is held no invocation starts; the id the next one gets.
    virtual std::unique_lock<std::shared_mutex> hold_launches() = 0;
    virtual uint64_t next_invocation() const = 0;
    // Rank 0: runs an invocation (claimed: completed is set) again, as a new one.
    virtual void rerun(const InvocationPtr& inv) = 0;
    // complete() for an invocation the heal will not run again.
    virtual void finish(const InvocationPtr& inv) = 0;
  };

  // heals: every node of the graph is pure, so a lost rank other than 0 is healed, not fatal.
  RankLink(std::shared_ptr<net::ProcessGroup> group, const std::string& graph, std::weak_ptr<Scheduler> scheduler,
           bool heals);
  ~RankLink();

  // Hosts this rank's part and finds the other ranks' parts, waiting up to the group's timeout for
  // them (TimeoutError naming the rank; PeerLostError when it is gone). Rank 0 returns once every
  // rank has found every part, so that no part goes away before the others have found it. Peers
  // may send before it returns: the executor holds the link (and its nodes run) first.
  void connect();
  // Stops this rank's part once the calls that came before it have run. The peers hear of it:
  // rank 0's part going away ends the others' serve().
  void close();

  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }

  void track(const InvocationPtr& inv);  // rank 0: an invocation it started
  void forget(uint64_t id);              // done: no message names it any more
  void start(uint64_t invocation, const std::vector<int>& ranks);  // rank 0
  void send_edge(int peer, const Edge& edge);
  // Throws the error that broke the link (a lost peer, a peer's bad message), if one did.
  void check_healthy();
  // Rank 0, an invocation that failed: when it failed for a lost rank and the link heals, it
  // waits for the heal, which runs it again (true); else it is not held (false). One the heal
  // does not pick up within 10 s (no rank was lost after all) is finished with its error.
  bool park(const InvocationPtr& inv);

  // The part's methods: what the peers call, one at a time, in the order each peer sent them.
  void on_start(uint64_t invocation);
  void on_edge(Edge edge);
  // The sender is done with the invocation; error: why it failed there (rank 0 only).
  void on_ack(uint64_t invocation, std::exception_ptr error);
  // Rank `peer` found every part (rank 0 only).
  void on_ready(int64_t peer);
  // From rank 0's healer: new invocations (ids from `first`) run with these ranks per node; older
  // ones are dropped here.
  bool on_replace(uint64_t first, std::vector<int> ranks);

 private:
  // A lost rank, or a broken connection to it (not a part that went away on purpose).
  static bool is_loss(const std::exception_ptr& why);
  std::string part_name(int rank) const;
  net::RemoteActor find(int peer, net::Deadline deadline) const;
  void find_peers();
  net::RemoteActor peer(int rank);
  InvocationPtr invocation(uint64_t id, Scheduler& scheduler);
  void peer_down(int peer, std::exception_ptr why);
  // A peer's message this rank cannot take: the link breaks with a CommError saying so.
  void refuse(Scheduler& scheduler, const std::string& what);
  // Every invocation this rank knows fails with `error` now (their other messages will never
  // come), later runs throw it, and serve() returns.
  void lose_peer(Scheduler& scheduler, std::exception_ptr error);
  // Rank 0's healer thread (rank_link_healing.cpp): heals the lost ranks, finishes parked
  // invocations no heal picks up.
  void heal_loop();
  void heal(Scheduler& scheduler);

  std::shared_ptr<net::ProcessGroup> group_;
  uint64_t number_;    // the group's n-th executor
  std::string where_;  // "executor of graph 'g' on rank 1: ", what errors raised here start with
  std::weak_ptr<Scheduler> scheduler_;
  net::RemoteActor self_;  // this rank's part
  std::mutex mutex_;       // guards what follows
  std::condition_variable readied_;
  std::vector<net::RemoteActor> peers_;  // by group rank; set once every part is found
  std::vector<uint8_t> ready_;           // rank 0: the ranks that found every part
  std::unordered_map<uint64_t, InvocationPtr> by_id_;  // invocations messages may name
  std::exception_ptr broken_;                          // what broke the link; it takes no more messages
  bool closing_ = false;
  // Healing.
  const bool heals_;
  uint64_t first_valid_ = 0;     // other ranks: invocations below it were dropped by a heal
  std::vector<uint8_t> lost_;    // rank 0: ranks healed away
  std::vector<int> unhealed_;    // rank 0: lost ranks the healer has yet to take out
  std::vector<std::pair<InvocationPtr, net::Deadline>> parked_;  // rank 0: waiting for a heal, until
  std::condition_variable heal_wake_;
  std::thread healer_;
};

}  // namespace troupe::detail
