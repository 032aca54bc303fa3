#pragma once
// RankLink: an executor's side of the other ranks (executor.h, "Ranks"). It tells peers about
// invocations through a net::DataflowChannel, and runs one thread per peer that turns the peer's
// messages into calls on the executor's Scheduler. It knows every invocation a message may name:
// rank 0's from run(), the others' made when their first message arrives and acked to rank 0
// when this rank is done with them. When a peer is lost, all of them fail with that error.
// Internal to the executor.
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dataflow/invocation_state.h"
#include "net/dataflow_channel.h"

namespace troupe::detail {

class RankLink {
 public:
  // What the executor does with what arrives.
  class Scheduler {
   public:
    virtual ~Scheduler() = default;
    // Another rank's state of an invocation rank 0 started (acks: 0).
    virtual InvocationPtr make_invocation(uint64_t id, int acks) = 0;
    // Gives this rank's nodes the constants and starts its nodes without inputs.
    virtual void launch_local(const InvocationPtr& inv) = 0;
    // A value for input `slot` of plan node `node` here (-1: graph output `slot`); CommError
    // when the plan has no such input on this rank.
    virtual void deliver_local(const InvocationPtr& inv, int node, int slot, bool live, Value value) = 0;
    virtual void node_done(const InvocationPtr& inv) = 0;
    virtual void complete(const InvocationPtr& inv) = 0;
    // Rank 0 said stop, or a peer was lost: serve() returns.
    virtual void driver_gone() = 0;
  };

  explicit RankLink(std::shared_ptr<net::ProcessGroup> group);

  int rank() const { return channel_.rank(); }
  int size() const { return channel_.size(); }

  // Starts the receiving threads; messages then call scheduler (which must outlive stop()).
  void listen(Scheduler& scheduler);
  // Tells the peers to stop and joins the receiving threads (each ends at its peer's stop).
  void stop();

  void track(const InvocationPtr& inv);  // rank 0: an invocation it started
  void forget(uint64_t id);              // done: no message names it any more
  void start(const InvocationState& inv);  // rank 0: to every peer
  void data(int peer, const InvocationState& inv, int node, int slot, bool live, const Tensor& value);
  // Throws the error that lost a peer, if one was lost.
  void check_healthy();

 private:
  InvocationPtr invocation(uint64_t id);
  void receive_from(int peer);
  void lose_peer(std::exception_ptr error);

  net::DataflowChannel channel_;
  Scheduler* scheduler_ = nullptr;
  std::vector<std::thread> receivers_;  // one per peer
  std::mutex mutex_;
  std::unordered_map<uint64_t, InvocationPtr> by_id_;  // invocations messages may name
  std::exception_ptr broken_;                          // the error that lost a peer
};

}  // namespace troupe::detail
