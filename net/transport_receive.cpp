// The transport's receives (transport.h): posted receives matched in posting order, MPI style,
// and the leader/followers scheme by which waiting threads receive for each other.
#include <poll.h>

#include <algorithm>

#include "net/transport_internal.h"

namespace troupe::net {

namespace {

Inbox inbox_of(FrameKind kind) {
  if (kind == FrameKind::data || kind == FrameKind::staged) return Inbox::p2p;
  return Inbox::collective;
}

}  // namespace

std::shared_ptr<Transport::Slot> Transport::post(uint64_t group, Inbox inbox, int64_t tag, int source) {
  auto slot = std::make_shared<Slot>();
  slot->key = {group, inbox, tag};
  slot->source = source;
  std::lock_guard lock(mutex_);
  // Messages that already arrived are delivered even after a failure: they are complete.
  if (auto it = unexpected_.find(slot->key); it != unexpected_.end()) {
    auto& queue = it->second;
    // A collective's abort notice wins over its data that came earlier: once any rank gave up on
    // the collective, no later receive of it may succeed.
    auto m = std::find_if(queue.begin(), queue.end(), [](const Message& q) { return q.header.kind == FrameKind::control; });
    if (m == queue.end())
      m = std::find_if(queue.begin(), queue.end(), [&](const Message& q) { return source < 0 || q.source == source; });
    if (m != queue.end()) {
      slot->message = std::move(*m);
      queue.erase(m);
      if (queue.empty()) unexpected_.erase(it);
      slot->finish();
      return slot;
    }
  }
  if (broken_) {
    slot->error = broken_;
    slot->finish();
  } else if (source >= 0 && source != rank() && live_.departed(source)) {
    slot->error = std::make_exception_ptr(
        PeerLostError("recv: rank " + std::to_string(source) + " has shut down (it said goodbye)"));
    slot->finish();
  } else {
    posted_[slot->key].push_back(slot);
  }
  return slot;
}

void Transport::lead_locked(const std::function<bool()>& done, Deadline deadline, Clock::time_point poll_until) {
  go_home();
  const Deadline slice = std::min(deadline, Clock::now() + kLeadSlice);
  std::vector<pollfd> fds;
  std::vector<int> wait_fds;
  while (true) {
    if (receive_links() > 0) {
      touch();
      write_held();  // answers came: requests held for them go now
    }
    const auto now = Clock::now();
    last_lead_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    if (done()) break;
    const Deadline spin_until = polls_until(poll_until);
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(slice - now).count();
    if (left <= 0) break;
    if (now < spin_until) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    wait_fds.clear();
    zmq_->wait_fds(wait_fds);
    if (direct_) direct_->wait_fds(wait_fds);
    if (stripes_) stripes_->wait_fds(wait_fds);
    fds.clear();
    for (int fd : wait_fds) fds.push_back(pollfd{fd, POLLIN, 0});
    const timespec ts{left / 1000000000, left % 1000000000};
    ::ppoll(fds.data(), fds.size(), &ts, nullptr);
  }
}

Clock::time_point Transport::polls_until(Clock::time_point poll_until) const {
  return std::max(poll_until, Clock::time_point(Clock::duration(last_activity_.load(std::memory_order_relaxed))) + busy_poll());
}

bool Transport::try_drive(const std::function<bool()>& done, Deadline deadline, Clock::time_point poll_until) {
  write_held();
  std::unique_lock router(router_mutex_, std::try_to_lock);
  if (!router.owns_lock()) return false;
  lead_locked(done, deadline, poll_until);
  return true;
}

void Transport::drive(const std::function<bool()>& done, Deadline deadline) {
  write_held();
  while (!done() && Clock::now() < deadline) {
    std::lock_guard router(router_mutex_);
    lead_locked(done, deadline);
  }
}

std::optional<Message> Transport::wait(const std::shared_ptr<Slot>& slot, Deadline deadline,
                                       std::chrono::microseconds poll_at_least) {
  // Leader/followers: the first waiter takes the ROUTER (and the direct links) and receives for
  // everyone, woken by their descriptors, so a small message costs no hand-off through a thread. The
  // others sleep on their slot; the leader (or the I/O thread) completes it.
  const auto ready = [&] { return slot->ready.load(std::memory_order_acquire); };
  const Clock::time_point poll_until = poll_at_least.count() > 0 ? Clock::now() + poll_at_least : Clock::time_point{};
  while (!ready() && Clock::now() < deadline) {
    if (!try_drive(ready, deadline, poll_until)) {
      // Another thread leads. The I/O thread holds the ROUTER only for the few microseconds it
      // takes to read a frame that woke it: a waiter inside its poll window tries again rather than
      // sleeping. Asleep, it would be woken through the scheduler for every frame (tens of
      // microseconds in a VM), and while it never leads, the I/O thread keeps reading for it, so
      // it would stay that way (1 to 3 runs in 1,000 of a 4-byte all_reduce at 40-50 us per call).
      // A waiter that leads keeps the ROUTER for a slice: the others sleep, leaving it the CPU.
      if (io_thread_reads_.load(std::memory_order_relaxed) && Clock::now() < polls_until(poll_until)) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
        continue;
      }
      std::unique_lock lock(mutex_);
      slot->cv.wait_until(lock, std::min(deadline, Clock::now() + kLeadSlice), [&] { return slot->done; });
    }
  }
  std::unique_lock lock(mutex_);
  // A deadline that has passed is only checked: a timed wait on it still costs a timer and a
  // reschedule (~100 us in a VM), and polling with wait(slot, now) is common.
  const bool done = Clock::now() >= deadline ? slot->done : slot->cv.wait_until(lock, deadline, [&] { return slot->done; });
  if (!done) {
    if (auto it = posted_.find(slot->key); it != posted_.end()) {
      std::erase(it->second, slot);
      if (it->second.empty()) posted_.erase(it);
    }
    return std::nullopt;
  }
  if (slot->error) std::rethrow_exception(slot->error);
  std::optional<Message> message = std::move(slot->message);
  slot->message.reset();
  return message;
}

bool Transport::is_ready(const Slot& slot) {
  std::lock_guard lock(mutex_);
  return slot.done;
}

void Transport::deliver(Message message) {
  const Key key{message.header.group, inbox_of(message.header.kind), message.header.tag};
  if (auto it = posted_.find(key); it != posted_.end()) {
    auto& queue = it->second;
    // A collective's abort notice goes to whichever receive of that collective is waiting.
    const bool any_receiver = message.header.kind == FrameKind::control;
    for (auto s = queue.begin(); s != queue.end(); ++s) {
      if (!any_receiver && (*s)->source >= 0 && (*s)->source != message.source) continue;
      std::shared_ptr<Slot> slot = *s;
      queue.erase(s);
      if (queue.empty()) posted_.erase(it);
      slot->message = std::move(message);
      slot->finish();
      slot->cv.notify_all();
      return;
    }
  }
  unexpected_[key].push_back(std::move(message));
}

}  // namespace troupe::net
