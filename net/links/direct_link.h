#pragma once
// The direct link (link.h): small frames on one plain TCP connection per pair of ranks (the lower
// rank dials, both write it; net/direct_link.h has the sockets and the wire), written by the
// sending thread itself and read by whoever holds the transport's receiving side, so a small
// request costs one send() and one recv() and crosses no ZeroMQ I/O thread. The listener also
// takes the stripes' connections (stripe_link.h), which introduce themselves by stripe number and
// are handed on.
//
//   DirectLink direct(options, address, sink, hooks);  // listens; fills address.direct
//   direct.connect(1, table[1].direct, deadline);      // rank 0 dials rank 1
//   direct.send(frame);                                // false: too big, or no link to frame.dst
//   direct.receive();                                  // records as frames, links as they come
//
// A request (OutgoingFrame::awaits_answer) may wait a little: while the peer still owes answers to
// several frames, a small one is kept (16 KiB at most) until write_held time, so pipelined
// requests cost one write per batch. Every connection opens with the handshake (net/handshake.h);
// not for encrypted jobs: the link is authenticated, not encrypted.
//
// Internal to net/.
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "net/direct_link.h"
#include "net/bootstrap/host_identity.h"
#include "net/link.h"

namespace troupe::net {

struct TransportOptions;

class DirectLink final : public Link {
 public:
  struct Hooks {
    std::function<std::mutex&(int peer)> send_mutex;  // the transport's lock of a peer's sends
    std::function<void()> wake;                       // the I/O thread writes what a link keeps
    std::function<bool()> turns_soon;  // a thread leads and the I/O thread turns within a millisecond
    // A stripe's connection came (session: its keys when its records are sealed).
    std::function<void(int fd, int peer, int stripe, const std::optional<SessionKeys>& session)> on_stripe;
  };
  DirectLink(const TransportOptions& options, PeerAddress& address, FrameSink& sink, Hooks hooks);
  ~DirectLink() override;

  Path path() const override { return direct_path; }
  bool send(const OutgoingFrame& frame) override;
  int receive() override;
  void wait_fds(std::vector<int>& fds) const override;  // with the receiving side held
  LinkTraffic& traffic(int r) override { return peer(r).traffic; }

  // With r's send lock held: the lower rank of a pair dials the link (the higher one answers on it,
  // once it came: receive()). Unreachable by plain TCP: r's frames all take another link.
  void connect(int r, const std::string& endpoint, Deadline deadline);
  bool linked(int r) const { return peer(r).linked.load(); }
  int links() const;
  // Rank r's hello said whether it dialed a link to this rank; until that link came, awaits_link.
  void set_dialed(int r, bool dialed) { peer(r).dialed.store(dialed); }
  bool awaits_link(int r) const { return peer(r).dialed.load() && !peer(r).linked.load(); }
  bool broken(int r) const { return peer(r).broken.load(); }
  void heard_from(int r) { peer(r).sent_unanswered.store(0, std::memory_order_relaxed); }

  // Frames kept for a later write (a SendBatch's, or requests waiting for answers).
  bool holding() const { return peers_holding_.load() > 0; }
  // With r's send lock held: whether r's link keeps frames for later, and writing what it keeps as
  // far as the socket takes it (true while some is still kept: the I/O thread writes the rest).
  bool holds(int r) const { return peer(r).holds; }
  bool flush(int r);
  // Writes what r's link keeps before a frame that takes another link (true: still some kept).
  bool flush_before_other(int r);
  void flush_until(int r, Deadline deadline);  // with r's send lock held, before closing
  // With r's send lock held: why r fails when it has taken none of the bytes kept for it for
  // longer than the send-stall limit (net/limits.h), naming its rank and address; empty: it reads.
  std::string stalled(int r, Clock::time_point now) const;
  // For the I/O thread: links whose socket did not take all they keep, and their descriptors.
  bool backlogged(int r) const { return peer(r).backlogged.load(); }
  int fd(int r) const { return peer(r).sender->fd(); }
  int listener_fd() const { return listener_.fd(); }
  void accept_waiting();  // the I/O thread takes new connections, for the next receive()

 private:
  struct Peer {
    std::unique_ptr<DirectSender> sender;  // set once, under the send lock
    std::atomic<bool> linked{false};       // sender is set
    std::atomic<bool> dialed{false};       // its hello said it dialed a link to this rank
    std::atomic<bool> backlogged{false};   // the I/O thread writes the rest when it can
    bool holds = false;                    // under the send lock: frames kept for a later write
    std::atomic<int> sent_unanswered{0};   // frames sent since the last one came from this peer
    std::atomic<bool> broken{false};       // the link failed: the peer is suspect
    LinkTraffic traffic;
  };
  Peer& peer(int r) { return *peers_[static_cast<size_t>(r)]; }
  const Peer& peer(int r) const { return *peers_[static_cast<size_t>(r)]; }
  bool holds_for_answers(const Peer& peer) const;
  std::string overstays(const DirectReceiver& in, bool speaking, size_t pending_after, Clock::time_point& now) const;
  void stop_holding(Peer& peer);  // under the send lock

  const int rank_, world_size_;
  const size_t max_bytes_;
  const JobKeys keys_;  // the job's, or all zero in an insecure job
  const bool encrypt_;  // records sealed (sealed_stream.h)
  FrameSink& sink_;
  Hooks hooks_;
  DirectListener listener_;
  std::vector<std::unique_ptr<Peer>> peers_;
  std::atomic<int> peers_holding_{0};
  std::vector<std::unique_ptr<DirectReceiver>> inbound_;  // under the receiving side
  std::mutex accepted_mutex_;
  std::vector<int> accepted_;  // connections the I/O thread accepted, for the next receive()
  struct Dialed {
    SharedFd fd;
    int peer;
    std::optional<SessionKeys> session;
  };
  std::vector<Dialed> dialed_;  // links connect() dialed (and their peer), read the same way
};

}  // namespace troupe::net
