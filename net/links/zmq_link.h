#pragma once
// The ZeroMQ link (link.h): a DEALER to each peer's ROUTER carries the frames that take neither a
// direct link nor the stripes (all of them in an encrypted job), and this rank's one ROUTER, bound to
// tcp:// and ipc://, receives every peer's. Payloads go by reference (zmq_msg_init_data keeps the
// tensor's Storage alive until ZeroMQ lets go) and come adopted (a Storage owning the zmq_msg_t).
// A monitor per DEALER reports a closed connection; with CURVE keys the ROUTER is a CURVE server
// and a ZAP handler admits only clients holding the job's key pair (job_secret.h).
//
//   ZmqLink zmq(context, options, address, sink);  // binds; fills address.tcp and address.ipc
//   zmq.connect(1, table[1].tcp);                   // a DEALER (and its monitor) to rank 1
//   zmq.send(frame);                                // never blocks
//   zmq.receive();                                  // whoever holds the receiving side
//
// Internal to net/.
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "net/job_secret.h"
#include "net/bootstrap/host_identity.h"
#include "net/link.h"

namespace troupe::net {

struct TransportOptions;

class ZmqLink final : public Link {
 public:
  // Binds the ROUTER (and, with CURVE keys, the ZAP handler first) on `context`.
  ZmqLink(void* context, const TransportOptions& options, PeerAddress& address, FrameSink& sink);
  ~ZmqLink() override;  // closes what close_* left open; removes the ipc:// file
  ZmqLink(const ZmqLink&) = delete;
  ZmqLink& operator=(const ZmqLink&) = delete;

  Path path() const override { return zmq_path; }
  bool send(const OutgoingFrame& frame) override;  // takes every frame
  int receive() override;
  void wait_fds(std::vector<int>& fds) const override { fds.push_back(router_fd_); }
  LinkTraffic& traffic(int r) override { return peer(r).traffic; }

  // A DEALER to rank r's ROUTER at endpoint, and a monitor of its connection.
  void connect(int r, const std::string& endpoint);
  bool connected(int r) const { return peer(r).dealer != nullptr; }
  // A frame of only a header (hello, heartbeat, goodbye): dropped when ZeroMQ cannot queue it.
  void send_header(int r, const FrameHeader& h);

  // For the I/O thread's poll: the ROUTER's descriptor (edge-like: drained on every turn), the ZAP
  // handler (null without CURVE) and each peer's monitor (null before connect).
  int router_fd() const { return router_fd_; }
  void* zap() const { return zap_; }
  void answer_zap();
  void* monitor(int r) const { return peer(r).monitor; }
  // The ROUTER's monitor: reading it logs each connection the ROUTER closed that carried no rank's
  // frames (a stranger's, cut off by the limits of net/limits.h), one line naming its address.
  void* router_monitor() const { return router_monitor_; }
  void read_router_monitor();
  // Reads one event of r's monitor: a closed connection makes the peer suspect (FrameSink).
  void read_monitor(int r);

  // The I/O thread's end: ROUTER, ZAP handler and monitors closed on the thread that used them.
  void close_receiving();
  // The transport's end: rank r's DEALER, flushing for up to linger_ms (0: what is queued is dropped).
  void close_dealer(int r, int linger_ms);

 private:
  const int rank_, world_size_;
  const std::optional<CurveKeys> curve_;
  FrameSink& sink_;
  void* context_;
  void* router_ = nullptr;
  int router_fd_ = -1;  // ZeroMQ's descriptor that fires when frames may be waiting
  void* zap_ = nullptr;
  std::string ipc_file_;
  // A peer's end of this path: the DEALER to its ROUTER (its routing id there is this rank's),
  // the monitor of that connection, and the traffic. What it sends goes out on its DEALER; what
  // it sent comes in on the ROUTER this rank shares among all peers, which receive() drains.
  struct Peer {
    void* dealer = nullptr;   // set once by connect()
    void* monitor = nullptr;  // the I/O thread's after connect()
    LinkTraffic traffic;
  };
  Peer& peer(int r) { return peers_[static_cast<size_t>(r)]; }
  const Peer& peer(int r) const { return peers_[static_cast<size_t>(r)]; }
  std::vector<Peer> peers_;  // by rank
  void* router_monitor_ = nullptr;
  // By rank: the ROUTER's connection its frames came on last (set by the receiving thread).
  std::unique_ptr<std::atomic<int>[]> rank_fd_;
  std::map<int, std::string> accepted_;  // the I/O thread's: the ROUTER's connections, by fd -> address
  std::string handshake_failure_;         // the I/O thread's: the one that precedes the next close
};

}  // namespace troupe::net
