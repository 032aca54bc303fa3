#pragma once
// Which of a transport's peers are alive (transport.h: "Failure"): each says hello once connected
// and goodbye when it closes; in between, a peer silent for peer_timeout, or whose connection
// closed without a goodbye coming within a short grace, is lost. The transport sends the
// heartbeats and acts on the verdicts (breaks, tells the remote actors); this object keeps the
// per-peer state and the rules.
//
//   PeerLiveness live(/*rank=*/0, /*world_size=*/2, 3s);
//   live.heard(1);                                        // any frame from rank 1
//   std::exception_ptr lost = live.check(1, Clock::now(), /*link_broken=*/false);  // each tick
//
// Internal to net/. Methods marked "locked" run under the transport's lock; the rest are lock-free.
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "net/work.h"

namespace troupe::net {

class PeerLiveness {
 public:
  PeerLiveness(int rank, int world_size, std::chrono::milliseconds peer_timeout);

  void heard(int r);                           // a frame came from r now
  void start(Clock::time_point now);           // connected: every peer counts as heard now
  bool departed(int r) const { return peer(r).departed.load(); }  // said goodbye
  bool lost(int r) const { return peer(r).lost.load(); }          // crashed, cut off, or sent a bad frame
  bool gone(int r) const { return r != rank_ && (lost(r) || departed(r)); }

  // locked:
  void hello(int r);                  // r said hello: alive, and no longer suspect
  bool said_hello(int r) const { return peer(r).hello; }
  bool all_said_hello() const;
  std::string not_heard() const;      // the ranks without a hello, "1, 3"
  // A connection to r closed: lost unless its goodbye comes within the grace (ignored before its
  // hello, after its goodbye, or while already suspect).
  void suspect(int r, Clock::time_point now);
  void depart(int r) { peer(r).departed = true; }
  bool lose(int r, std::exception_ptr error);  // false: lost already
  std::exception_ptr lost_error(int r) const { return peer(r).lost_error; }
  // One heartbeat tick's verdict on r: PeerLostError when r is lost now (silent past the timeout,
  // or suspect past the grace; a broken link counts as a closed connection), else null.
  std::exception_ptr check(int r, Clock::time_point now, bool link_broken);

 private:
  struct Peer {
    std::atomic<Clock::rep> last_seen{0};  // when a frame last came (time_since_epoch ticks)
    bool hello = false;                    // locked
    bool suspect = false;                  // locked: its connection closed, no goodbye yet
    Clock::time_point suspect_since;       // locked
    std::atomic<bool> departed{false};
    std::atomic<bool> lost{false};
    std::exception_ptr lost_error;         // locked
  };
  Peer& peer(int r) { return peers_[static_cast<size_t>(r)]; }
  const Peer& peer(int r) const { return peers_[static_cast<size_t>(r)]; }

  const int rank_, world_size_;
  const std::chrono::milliseconds timeout_;
  std::unique_ptr<Peer[]> peers_;  // by rank
};

}  // namespace troupe::net
