// RankLink's healing (rank 0 only; rank_link.h says when a link heals): invocations that failed for
// a lost rank park here; the healer thread moves the lost ranks' nodes to the survivors, on every
// survivor first and then here, and runs the parked invocations again; one no heal picks up in time
// finishes with its error.
#include <algorithm>
#include <chrono>

#include "dataflow/rank_link.h"

namespace troupe::detail {

namespace {

// How long an invocation failed by a lost rank waits for the heal: a loss is heard of within 5 s.
constexpr std::chrono::milliseconds kHealGrace{10'000};

}  // namespace

bool RankLink::park(const InvocationPtr& inv) {
  if (!heals_ || rank() != 0) return false;
  {
    std::lock_guard lock(inv->mutex);
    if (!is_loss(inv->error)) return false;
  }
  {
    std::lock_guard lock(mutex_);
    if (broken_ || closing_) return false;
    if (inv->parked.exchange(true)) return true;
    parked_.emplace_back(inv, net::deadline_after(kHealGrace));
  }
  heal_wake_.notify_all();
  return true;
}

void RankLink::heal_loop() {
  std::unique_lock lock(mutex_);
  while (!closing_ && !broken_) {
    if (!unhealed_.empty()) {
      lock.unlock();
      if (auto scheduler = scheduler_.lock()) heal(*scheduler);
      lock.lock();
      continue;
    }
    // Parked invocations that no heal picked up in time (a loss that was not a rank's after
    // all) are finished with their errors.
    net::Deadline due = net::Deadline::max();
    for (auto& [inv, until] : parked_) due = std::min(due, until);
    if (due <= net::Clock::now()) {
      const auto expired = std::partition(parked_.begin(), parked_.end(), [&](auto& p) { return p.second > due; });
      std::vector<InvocationPtr> finished;
      for (auto it = expired; it != parked_.end(); ++it) finished.push_back(it->first);
      parked_.erase(expired, parked_.end());
      lock.unlock();
      if (auto scheduler = scheduler_.lock())
        for (auto& inv : finished) scheduler->finish(inv);
      lock.lock();
      continue;
    }
    const size_t seen = parked_.size();
    const auto woken = [&] { return closing_ || broken_ || !unhealed_.empty() || parked_.size() != seen; };
    if (due == net::Deadline::max()) heal_wake_.wait(lock, woken);
    else heal_wake_.wait_until(lock, due, woken);
  }
}

// Moves the lost ranks' nodes to the survivors, on every survivor first (each answers once it has
// taken the placement, so no new invocation's message reaches a rank that does not run its node
// yet), then here, and runs the invocations that were in flight again. No invocation starts
// meanwhile. A survivor lost on the way is one more rank to take out.
void RankLink::heal(Scheduler& scheduler) {
  auto hold = scheduler.hold_launches();
  std::vector<int> ranks;
  while (true) {
    std::vector<uint8_t> lost;
    {
      std::lock_guard lock(mutex_);
      if (broken_ || closing_) return;
      for (int r : unhealed_) lost_[r] = 1;
      unhealed_.clear();
      lost = lost_;
    }
    ranks = scheduler.placement_without(lost);
    const uint64_t first = scheduler.next_invocation();
    bool another_lost = false;
    for (int p = 1; p < size() && !another_lost; ++p) {
      if (lost[p]) continue;
      try {
        peer(p).request<bool>("replace", first, ranks).get();
      } catch (const CommError&) {
        if (!is_loss(std::current_exception())) return lose_peer(scheduler, std::current_exception());
        std::lock_guard lock(mutex_);
        unhealed_.push_back(p);
        another_lost = true;
      } catch (...) {
        return lose_peer(scheduler, std::current_exception());
      }
    }
    if (!another_lost) break;
  }
  scheduler.adopt(ranks);
  std::vector<InvocationPtr> again;
  {
    std::lock_guard lock(mutex_);
    for (auto& [id, inv] : by_id_) again.push_back(inv);
    by_id_.clear();
    for (auto& [inv, until] : parked_) again.push_back(inv);
    parked_.clear();
  }
  std::sort(again.begin(), again.end(), [](const auto& a, const auto& b) { return a->id < b->id; });
  again.erase(std::unique(again.begin(), again.end()), again.end());
  for (auto& inv : again)
    if (!inv->completed.exchange(true)) scheduler.rerun(inv);
}

bool RankLink::on_replace(uint64_t first, std::vector<int> ranks) {
  auto scheduler = scheduler_.lock();
  if (!scheduler) return false;
  if (rank() == 0 || !heals_) {
    refuse(*scheduler, "a peer sent a replace, which only rank 0 of an executor that heals sends");
    return false;
  }
  try {
    scheduler->adopt(ranks);
  } catch (const CommError& e) {
    refuse(*scheduler, e.what());
    return false;
  }
  std::vector<InvocationPtr> dropped;
  {
    std::lock_guard lock(mutex_);
    first_valid_ = std::max(first_valid_, first);
    for (auto& [id, inv] : by_id_) dropped.push_back(inv);
    by_id_.clear();
  }
  for (auto& inv : dropped) {
    inv->fail(std::make_exception_ptr(CancelledError(where_ + "invocation " + std::to_string(inv->id) +
                                                     " is run again after a rank was lost")));
    scheduler->finish(inv);  // its ack names an invocation rank 0 no longer waits for
  }
  return true;
}

}  // namespace troupe::detail
