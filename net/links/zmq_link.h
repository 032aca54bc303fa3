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

  // A DEALER to rank r's ROUTER at endpoint, and a monitor of its connection.
  void connect(int r, const std::string& endpoint);
  bool connected(int r) const { return dealers_[static_cast<size_t>(r)] != nullptr; }
  // A frame of only a header (hello, heartbeat, goodbye): dropped when ZeroMQ cannot queue it.
  void send_header(int r, const FrameHeader& h);

  // For the I/O thread's poll: the ROUTER's descriptor (edge-like: drained on every turn), the ZAP
  // handler (null without CURVE) and each peer's monitor (null before connect).
  int router_fd() const { return router_fd_; }
  void* zap() const { return zap_; }
  void answer_zap();
  void* monitor(int r) const { return monitors_[static_cast<size_t>(r)]; }
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
  std::vector<void*> dealers_;   // by rank; set once by connect()
  std::vector<void*> monitors_;  // by rank; the I/O thread's after connect()
};

}  // namespace troupe::net
