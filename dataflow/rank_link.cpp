#include "dataflow/rank_link.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

namespace troupe::detail {

namespace {

const char kExecutorsMade = 0;  // its address names the count's attachment of a group

// The n-th executor this process made on this group: the same n on every rank of the group, as
// they all make the same executors in the same order. Counted per group, not per group id: a
// quorum's epochs each have a group of their own with the same id, and a rank that joins one
// has made none on the earlier ones.
uint64_t next_executor_number(net::ProcessGroup& group) {
  void* made = group.attachment(&kExecutorsMade, [](net::ProcessGroup&) -> std::shared_ptr<void> {
    return std::make_shared<std::atomic<uint64_t>>(0);
  });
  return static_cast<std::atomic<uint64_t>*>(made)->fetch_add(1);
}

}  // namespace

bool RankLink::is_loss(const std::exception_ptr& why) {
  if (!why) return false;
  try {
    std::rethrow_exception(why);
  } catch (const CommError&) {
    return true;
  } catch (...) {
    return false;
  }
}

RankLink::RankLink(std::shared_ptr<net::ProcessGroup> group, const std::string& graph, std::weak_ptr<Scheduler> scheduler,
                   bool heals)
    : group_(std::move(group)),
      number_(next_executor_number(*group_)),
      where_("executor of graph '" + graph + "' on rank " + std::to_string(group_->rank()) + ": "),
      scheduler_(std::move(scheduler)),
      ready_(group_->size(), 0),
      heals_(heals),
      lost_(group_->size(), 0) {}

RankLink::~RankLink() {
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
  }
  heal_wake_.notify_all();
  if (!healer_.joinable()) return;
  if (healer_.get_id() == std::this_thread::get_id()) healer_.detach();  // the healer let go last
  else healer_.join();
}

void RankLink::connect() {
  self_ = net::host(part_name(rank()), shared_from_this(), net::Method{"start", &RankLink::on_start},
                    net::Method{"edge", &RankLink::on_edge}, net::Method{"ack", &RankLink::on_ack},
                    net::Method{"ready", &RankLink::on_ready}, net::Method{"replace", &RankLink::on_replace});
  try {
    find_peers();
  } catch (...) {
    close();
    throw;
  }
  // The healer holds the link until close() (or a break) ends it.
  if (heals_ && rank() == 0) healer_ = std::thread([self = shared_from_this()] { self->heal_loop(); });
}

std::string RankLink::part_name(int r) const {
  return "troupe.dataflow/" + std::to_string(group_->id()) + "." + std::to_string(number_) + "/" + std::to_string(r);
}

net::RemoteActor RankLink::find(int peer, net::Deadline deadline) const {
  const std::string name = part_name(peer);
  while (true) {
    try {
      return net::lookup(name);
    } catch (const ValueError&) {
      // Not hosted yet: that rank is still on its way to this executor.
    }
    group_->check_peer(peer);
    if (net::Clock::now() >= deadline)
      throw TimeoutError(where_ + "rank " + std::to_string(peer) + " hosted no part '" + name + "' within " +
                         std::to_string(group_->timeout().count()) +
                         " ms (every rank of the group makes the same Executors on it, in the same order)");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void RankLink::find_peers() {
  const net::Deadline deadline = net::deadline_after(group_->timeout());
  std::vector<net::RemoteActor> found(size());
  for (int p = 0; p < size(); ++p)
    if (p != rank()) found[p] = find(p, deadline);
  {
    std::lock_guard lock(mutex_);
    peers_ = found;
  }
  std::weak_ptr<RankLink> weak = weak_from_this();
  for (int p = 0; p < size(); ++p)
    if (p != rank())
      found[p].on_down([weak, p](std::exception_ptr why) {
        if (auto link = weak.lock()) link->peer_down(p, why);
      });
  if (rank() != 0) return found[0].send("ready", rank());
  std::unique_lock lock(mutex_);
  const auto all_ready = [&] {
    for (int p = 1; p < size(); ++p)
      if (!ready_[p]) return false;
    return true;
  };
  readied_.wait_until(lock, deadline, [&] { return broken_ || all_ready(); });
  if (broken_) std::rethrow_exception(broken_);
  if (all_ready()) return;
  std::string missing;
  for (int p = 1; p < size(); ++p)
    if (!ready_[p]) missing += (missing.empty() ? "" : ", ") + std::to_string(p);
  throw TimeoutError(where_ + "rank(s) " + missing + " did not find every part within " +
                     std::to_string(group_->timeout().count()) + " ms");
}

void RankLink::close() {
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
  }
  heal_wake_.notify_all();
  if (healer_.joinable() && healer_.get_id() != std::this_thread::get_id()) healer_.join();
  if (!self_.valid()) return;
  try {
    self_.stop();
  } catch (const Error&) {
    // This rank's RemoteActors is gone, and the part with it.
  }
}

void RankLink::track(const InvocationPtr& inv) {
  std::lock_guard lock(mutex_);
  by_id_[inv->id] = inv;
}

void RankLink::forget(uint64_t id) {
  std::lock_guard lock(mutex_);
  by_id_.erase(id);
}

net::RemoteActor RankLink::peer(int r) {
  std::lock_guard lock(mutex_);
  return peers_[r];
}

void RankLink::start(uint64_t invocation, const std::vector<int>& ranks) {
  for (int p : ranks) peer(p).send("start", invocation);
}

void RankLink::send_edge(int to, const Edge& edge) { peer(to).send("edge", edge); }

void RankLink::check_healthy() {
  std::lock_guard lock(mutex_);
  if (broken_) std::rethrow_exception(broken_);
}

// This rank's state of invocation `id`: rank 0 made it in run(); another rank makes it when the
// first message about it arrives, and acks to rank 0 when its nodes are done with it.
InvocationPtr RankLink::invocation(uint64_t id, Scheduler& scheduler) {
  std::lock_guard lock(mutex_);
  if (broken_) return nullptr;
  auto it = by_id_.find(id);
  if (it != by_id_.end()) return it->second;
  if (rank() == 0 || id < first_valid_) return nullptr;  // done, or dropped by a heal
  auto inv = scheduler.make_invocation(id, 0);
  inv->on_done = [to = peers_[0]](InvocationState& done) {
    try {
      to.send("ack", done.id, done.error);
    } catch (const Error&) {
      // Rank 0's part is lost or gone: its down notice fails what is left here.
    }
  };
  by_id_[id] = inv;
  return inv;
}

void RankLink::on_start(uint64_t id) {
  auto scheduler = scheduler_.lock();
  if (!scheduler) return;
  if (rank() == 0) return refuse(*scheduler, "a peer sent a start, which only rank 0 sends");
  if (InvocationPtr inv = invocation(id, *scheduler)) scheduler->launch_local(inv);
}

void RankLink::on_edge(Edge edge) {
  auto scheduler = scheduler_.lock();
  if (!scheduler) return;
  if (edge.start && rank() == 0) return refuse(*scheduler, "a peer sent a start, which only rank 0 sends");
  InvocationPtr inv = invocation(edge.invocation, *scheduler);
  if (!inv) return;
  if (edge.start) scheduler->launch_local(inv);
  try {
    scheduler->deliver_local(inv, edge.targets, std::move(edge.value));
  } catch (const CommError&) {
    lose_peer(*scheduler, std::current_exception());
  }
}

void RankLink::on_ack(uint64_t id, std::exception_ptr error) {
  auto scheduler = scheduler_.lock();
  if (!scheduler) return;
  if (rank() != 0) return refuse(*scheduler, "a peer sent an ack, which only rank 0 takes");
  InvocationPtr inv = invocation(id, *scheduler);
  if (!inv) return;
  if (error) inv->fail(error);
  scheduler->node_done(inv);
}

void RankLink::on_ready(int64_t peer) {
  auto scheduler = scheduler_.lock();
  if (!scheduler) return;
  if (rank() != 0 || peer < 1 || peer >= size())
    return refuse(*scheduler, "a peer said rank " + std::to_string(peer) + " is ready, which rank " +
                                  std::to_string(rank()) + " does not wait for");
  {
    std::lock_guard lock(mutex_);
    ready_[peer] = 1;
  }
  readied_.notify_all();
}

// A peer's part is down: its rank was lost (every rank fails what it knows), or its executor went
// away: rank 0's ends serve() elsewhere; another rank's, while rank 0's still runs, breaks rank
// 0's (its invocations would wait for that rank forever).
void RankLink::peer_down(int peer, std::exception_ptr why) {
  auto scheduler = scheduler_.lock();
  if (!scheduler) return;
  {
    std::lock_guard lock(mutex_);
    if (closing_) return;
  }
  if (is_loss(why) && heals_ && peer != 0) {
    if (rank() != 0) return;  // rank 0 heals it
    {
      std::lock_guard lock(mutex_);
      if (!lost_[peer] && std::find(unhealed_.begin(), unhealed_.end(), peer) == unhealed_.end())
        unhealed_.push_back(peer);
    }
    heal_wake_.notify_all();
    return;
  }
  if (is_loss(why)) return lose_peer(*scheduler, why);
  if (rank() == 0)
    return lose_peer(*scheduler, std::make_exception_ptr(CommError(
                                     where_ + "rank " + std::to_string(peer) + "'s executor went away while this one runs")));
  if (peer == 0) scheduler->driver_gone();
}

void RankLink::refuse(Scheduler& scheduler, const std::string& what) {
  lose_peer(scheduler, std::make_exception_ptr(CommError(where_ + what)));
}

void RankLink::lose_peer(Scheduler& scheduler, std::exception_ptr error) {
  std::vector<InvocationPtr> lost;
  {
    std::lock_guard lock(mutex_);
    if (!broken_) broken_ = error;
    for (auto& [id, inv] : by_id_) lost.push_back(inv);
    for (auto& [inv, until] : parked_) lost.push_back(inv);
    parked_.clear();
  }
  readied_.notify_all();
  heal_wake_.notify_all();
  for (auto& inv : lost) {
    inv->fail(error);
    scheduler.finish(inv);
  }
  scheduler.driver_gone();
}

}  // namespace troupe::detail
