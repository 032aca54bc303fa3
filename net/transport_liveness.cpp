// What the transport does about its peers' liveness (peer_liveness.h keeps the state and the
// rules): hello, goodbye and heartbeats every heartbeat_interval sent, and what a lost or departed
// peer breaks (posted receives, pending sends, the remote actors' supervision).
#include <cstring>

#include "net/errors.h"
#include "net/transport_internal.h"

namespace troupe::net {

thread_local bool telling_handler = false;

void Transport::check_healthy() {
  std::lock_guard lock(mutex_);
  if (broken_) std::rethrow_exception(broken_);
}

void Transport::check_peer(int r) {
  if (r != rank() && live_.departed(r))
    throw PeerLostError("rank " + std::to_string(r) + " has shut down (it said goodbye)");
}

bool Transport::is_gone(int r) const { return live_.gone(r); }

bool Transport::is_lost(int r) const { return r != rank() && live_.lost(r); }

void Transport::declare_lost(int r, const std::string& why) {
  if (r < 0 || r >= world_size() || r == rank()) return;
  lose_peer(r, std::make_exception_ptr(PeerLostError(why)));
}

void Transport::send_control_locked(int r, FrameKind kind) {
  Peer& peer = *peers_[r];
  FrameHeader h;
  h.kind = kind;
  h.source = rank();
  h.dtype = DType::u8;
  h.shape = {0};
  h.seq = peer.next_seq++;
  if (kind == FrameKind::hello) h.tag = direct_ && direct_->linked(r) ? 1 : 0;  // 1: a direct link was dialed to it
  zmq_->send_header(r, h);
}

void Transport::break_transport(std::exception_ptr error) {
  std::vector<std::weak_ptr<detail::Completion>> sends;
  {
    std::lock_guard lock(mutex_);
    if (broken_) return;
    broken_ = error;
    for (auto& [key, queue] : posted_)
      for (auto& slot : queue) {
        slot->error = error;
        slot->finish();
        slot->cv.notify_all();
      }
    posted_.clear();
    sends.swap(pending_sends_);
  }
  hello_cv_.notify_all();
  for (auto& weak : sends)
    if (auto done = weak.lock()) done->finish(error);
}

void Transport::lose_peer(int r, std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    if (!live_.lose(r, error)) return;
  }
  break_transport(error);
  tell_actor_handler(r, error);
}

void Transport::tell_actor_handler(int r, std::exception_ptr error) {
  // Counted while told: set_actor_handler(nullptr) waits for it, so the RemoteActors being closed
  // is never let go last here, on the I/O thread (its group's transport would join this thread).
  std::shared_ptr<ActorHandler> handler;
  {
    std::lock_guard lock(mutex_);
    handler = actor_handler_;
    if (handler) ++handler_calls_;
  }
  if (!handler) return;
  telling_handler = true;
  handler->on_peer_lost(r, error);
  handler.reset();
  telling_handler = false;
  {
    std::lock_guard lock(mutex_);
    --handler_calls_;
  }
  handler_idle_.notify_all();
}

void Transport::peer_departed(int r) {
  live_.depart(r);
  auto error = std::make_exception_ptr(
      PeerLostError("rank " + std::to_string(r) + " has shut down (it said goodbye)"));
  {
    std::lock_guard lock(mutex_);
    for (auto it = posted_.begin(); it != posted_.end();) {
      std::erase_if(it->second, [&](const std::shared_ptr<Slot>& slot) {
        if (slot->source != r) return false;
        slot->error = error;
        slot->finish();
        slot->cv.notify_all();
        return true;
      });
      it = it->second.empty() ? posted_.erase(it) : std::next(it);
    }
  }
  hello_cv_.notify_all();
  tell_actor_handler(r, error);
}

void Transport::suspect(int r) {
  std::lock_guard lock(mutex_);
  live_.suspect(r, Clock::now());
}

void Transport::tick(Clock::time_point now) {
  if (!connected_) return;
  for (int r = 0; r < world_size(); ++r) {
    if (r == rank() || live_.departed(r)) continue;
    std::exception_ptr lost;
    {
      std::lock_guard lock(peers_[r]->send_mutex);
      send_control_locked(r, FrameKind::heartbeat);
      if (direct_)
        if (std::string why = direct_->stalled(r, now); !why.empty()) lost = std::make_exception_ptr(CommError(why));
    }
    if (lost) {
      lose_peer(r, lost);
      continue;
    }
    {
      std::lock_guard lock(mutex_);
      if (live_.lost(r)) continue;
      lost = live_.check(r, now, direct_ && (direct_->broken(r) || stripes_->broken(r)));
    }
    if (lost) lose_peer(r, lost);
  }
}

}  // namespace troupe::net
