#include "dataflow/rank_link.h"

#include "net/process_group.h"

namespace troupe::detail {

RankLink::RankLink(std::shared_ptr<net::ProcessGroup> group) : channel_(std::move(group)) {}

void RankLink::listen(Scheduler& scheduler) {
  scheduler_ = &scheduler;
  for (int peer = 0; peer < size(); ++peer)
    if (peer != rank()) receivers_.emplace_back([this, peer] { receive_from(peer); });
}

void RankLink::stop() {
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank()) continue;
    try {
      channel_.stop(peer);
    } catch (...) {
      // The peer is gone already; its receiver here has ended with the error.
    }
  }
  for (auto& r : receivers_) r.join();
  receivers_.clear();
}

void RankLink::track(const InvocationPtr& inv) {
  std::lock_guard lock(mutex_);
  by_id_[inv->id] = inv;
}

void RankLink::forget(uint64_t id) {
  std::lock_guard lock(mutex_);
  by_id_.erase(id);
}

void RankLink::start(const InvocationState& inv) {
  for (int peer = 0; peer < size(); ++peer)
    if (peer != rank()) channel_.start(peer, inv.id);
}

void RankLink::data(int peer, const InvocationState& inv, int node, int slot, bool live, const Tensor& value) {
  channel_.data(peer, inv.id, node, slot, live, value);
}

void RankLink::check_healthy() {
  std::lock_guard lock(mutex_);
  if (broken_) std::rethrow_exception(broken_);
}

// This rank's state of invocation `id`: rank 0 made it in run(); another rank makes it when the
// first message about it arrives, and acks to rank 0 when its nodes are done with it.
InvocationPtr RankLink::invocation(uint64_t id) {
  std::lock_guard lock(mutex_);
  auto it = by_id_.find(id);
  if (it != by_id_.end()) return it->second;
  if (rank() == 0) return nullptr;
  auto inv = scheduler_->make_invocation(id, 0);
  inv->on_done = [this](InvocationState& done) {
    try {
      channel_.ack(0, done.id, done.error);
    } catch (...) {
      lose_peer(std::current_exception());
    }
  };
  by_id_[id] = inv;
  return inv;
}

void RankLink::receive_from(int peer) {
  try {
    for (;;) {
      net::DataflowChannel::Incoming in = channel_.receive(peer);
      const net::DataflowHeader& h = in.header;
      if (h.message == net::DataflowMessage::stop) break;
      InvocationPtr inv = invocation(h.invocation);
      if (!inv) continue;
      switch (h.message) {
        case net::DataflowMessage::start: scheduler_->launch_local(inv); break;
        case net::DataflowMessage::data:
          scheduler_->deliver_local(inv, h.node, h.slot, h.live, in.value);
          break;
        case net::DataflowMessage::ack:
          if (in.error) inv->fail(in.error);
          scheduler_->node_done(inv);
          break;
        case net::DataflowMessage::stop: break;
      }
    }
    if (peer == 0) scheduler_->driver_gone();
  } catch (...) {
    lose_peer(std::current_exception());
  }
}

// A rank died or a message failed: every invocation this rank knows fails with that error now
// (their other messages will never come), and later runs throw it.
void RankLink::lose_peer(std::exception_ptr error) {
  std::vector<InvocationPtr> lost;
  {
    std::lock_guard lock(mutex_);
    if (!broken_) broken_ = error;
    for (auto& [id, inv] : by_id_) lost.push_back(inv);
  }
  for (auto& inv : lost) {
    inv->fail(error);
    scheduler_->complete(inv);
  }
  scheduler_->driver_gone();
}

}  // namespace troupe::detail
