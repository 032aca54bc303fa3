#include "net/peer_liveness.h"

#include "net/errors.h"

namespace troupe::net {

namespace {
constexpr auto kDisconnectGrace = std::chrono::milliseconds(500);  // for the goodbye of a closed connection
}  // namespace

PeerLiveness::PeerLiveness(int rank, int world_size, std::chrono::milliseconds peer_timeout)
    : rank_(rank), world_size_(world_size), timeout_(peer_timeout), peers_(new Peer[static_cast<size_t>(world_size)]) {}

void PeerLiveness::heard(int r) { peer(r).last_seen = Clock::now().time_since_epoch().count(); }

void PeerLiveness::start(Clock::time_point now) {
  for (int r = 0; r < world_size_; ++r) peer(r).last_seen = now.time_since_epoch().count();
}

void PeerLiveness::hello(int r) {
  peer(r).hello = true;
  peer(r).suspect = false;
}

bool PeerLiveness::all_said_hello() const {
  for (int r = 0; r < world_size_; ++r)
    if (r != rank_ && !peer(r).hello) return false;
  return true;
}

std::string PeerLiveness::not_heard() const {
  std::string missing;
  for (int r = 0; r < world_size_; ++r)
    if (r != rank_ && !peer(r).hello) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  return missing;
}

void PeerLiveness::suspect(int r, Clock::time_point now) {
  Peer& p = peer(r);
  if (p.hello && !p.departed && !p.suspect) {
    p.suspect = true;
    p.suspect_since = now;
  }
}

bool PeerLiveness::lose(int r, std::exception_ptr error) {
  Peer& p = peer(r);
  if (p.lost) return false;
  p.lost_error = std::move(error);
  p.lost = true;
  return true;
}

std::exception_ptr PeerLiveness::check(int r, Clock::time_point now, bool link_broken) {
  Peer& p = peer(r);
  if (link_broken) suspect(r, now);  // like a closed connection
  if (!p.hello) return nullptr;
  const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(
      now - Clock::time_point(Clock::duration(p.last_seen.load())));
  if (silent > timeout_)
    return std::make_exception_ptr(PeerLostError("rank " + std::to_string(r) + " was lost: no message or heartbeat for " +
                                                 std::to_string(silent.count()) + " ms"));
  if (p.suspect && now - p.suspect_since > kDisconnectGrace)
    return std::make_exception_ptr(
        PeerLostError("rank " + std::to_string(r) + " was lost: its connection closed (process died or network broke)"));
  return nullptr;
}

}  // namespace troupe::net
