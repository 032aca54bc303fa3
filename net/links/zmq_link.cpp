#include "net/links/zmq_link.h"

#include <unistd.h>
#include <zmq.h>

#include <cstdio>
#include <cstring>

#include "devices/error.h"
#include "devices/host_staging.h"
#include "net/limits.h"
#include "net/transport.h"
#include "net/transport_internal.h"
#include "net/zap_handler.h"
#include "net/zmq_socket.h"

namespace troupe::net {

ZmqLink::ZmqLink(void* context, const TransportOptions& options, PeerAddress& address, FrameSink& sink)
    : rank_(options.rank),
      world_size_(options.world_size),
      curve_(options.keys ? std::optional<CurveKeys>(options.keys->curve) : std::nullopt),
      sink_(sink),
      context_(context),
      peers_(static_cast<size_t>(options.world_size)),
      rank_fd_(new std::atomic<int>[static_cast<size_t>(options.world_size)]) {
  for (int r = 0; r < world_size_; ++r)
    if (r != rank_) peer(r).traffic = LinkTraffic(r, zmq_path);
  for (int r = 0; r < options.world_size; ++r) rank_fd_[r].store(-1);
  try {
    // The ZAP handler must exist before the ROUTER binds, or CURVE admits every client.
    if (curve_) zap_ = bind_zap_handler(context_);
    router_ = zmq_socket(context_, ZMQ_ROUTER);
    set_int(router_, ZMQ_RCVHWM, 0);
    set_int(router_, ZMQ_LINGER, 0);
    set_int(router_, ZMQ_ROUTER_HANDOVER, 1);
    // What a stranger may hold (net/limits.h): a frame past the limit is cut before it is
    // allocated, a connection that does not finish its greeting or completes no message (pings
    // every second go unanswered) is closed.
    const NetLimits& limits = net_limits();
    const int64_t max_frame = static_cast<int64_t>(limits.max_frame_bytes);
    if (zmq_setsockopt(router_, ZMQ_MAXMSGSIZE, &max_frame, sizeof max_frame) != 0) zmq_fail("ZMQ_MAXMSGSIZE");
    set_int(router_, ZMQ_HANDSHAKE_IVL, static_cast<int>(limits.handshake_timeout.count()));
    set_int(router_, ZMQ_HEARTBEAT_IVL, 1000);
    set_int(router_, ZMQ_HEARTBEAT_TIMEOUT, static_cast<int>(limits.progress_timeout.count()));
    // A ZAP domain makes libzmq refuse ZMTP 1.0 peers, which skip the greeting (and so its
    // deadline) and the heartbeats: any bytes not starting 0xFF would pass for one.
    set_string(router_, ZMQ_ZAP_DOMAIN, "troupe");
    raise_descriptor_limit();
    if (curve_) {
      set_int(router_, ZMQ_CURVE_SERVER, 1);
      set_string(router_, ZMQ_CURVE_SECRETKEY, curve_->secret_key);
    }
    if (!options.tcp_host.empty()) {
      const std::string endpoint = "tcp://" + options.tcp_host + ":*";
      if (zmq_bind(router_, endpoint.c_str()) != 0) zmq_fail("bind " + endpoint);
      address.tcp = last_endpoint(router_);
    }
    if (options.ipc) {
      const std::string path = ipc_path(rank_);
      ::unlink(path.c_str());
      if (zmq_bind(router_, ("ipc://" + path).c_str()) != 0) zmq_fail("bind ipc://" + path);
      ipc_file_ = path;
      address.ipc = "ipc://" + path;
    }
    const char* monitor_endpoint = "inproc://troupe-router-monitor";
    if (zmq_socket_monitor(router_, monitor_endpoint,
                           ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_DISCONNECTED) != 0)
      zmq_fail("zmq_socket_monitor");
    router_monitor_ = zmq_socket(context_, ZMQ_PAIR);
    set_int(router_monitor_, ZMQ_LINGER, 0);
    if (zmq_connect(router_monitor_, monitor_endpoint) != 0) zmq_fail("connect the ROUTER's monitor");
    size_t fd_size = sizeof router_fd_;
    if (zmq_getsockopt(router_, ZMQ_FD, &router_fd_, &fd_size) != 0) zmq_fail("ZMQ_FD");
  } catch (...) {
    close_receiving();
    throw;
  }
}

ZmqLink::~ZmqLink() {
  close_receiving();
  for (int r = 0; r < world_size_; ++r)
    if (peer(r).dealer) close_dealer(r, 0);
  if (!ipc_file_.empty()) ::unlink(ipc_file_.c_str());
}

void ZmqLink::connect(int r, const std::string& endpoint) {
  void*& dealer = peer(r).dealer;
  dealer = zmq_socket(context_, ZMQ_DEALER);
  set_string(dealer, ZMQ_ROUTING_ID, routing_id(rank_));
  set_int(dealer, ZMQ_SNDHWM, 0);  // sends never block; tensors are queued by reference
  set_int(dealer, ZMQ_LINGER, kLingerMs);
  if (curve_) {
    set_string(dealer, ZMQ_CURVE_SERVERKEY, curve_->public_key);
    set_string(dealer, ZMQ_CURVE_PUBLICKEY, curve_->public_key);
    set_string(dealer, ZMQ_CURVE_SECRETKEY, curve_->secret_key);
  }
  const std::string monitor_endpoint = "inproc://troupe-monitor-" + std::to_string(r);
  if (zmq_socket_monitor(dealer, monitor_endpoint.c_str(), ZMQ_EVENT_DISCONNECTED) != 0)
    zmq_fail("zmq_socket_monitor");
  void*& monitor = peer(r).monitor;
  monitor = zmq_socket(context_, ZMQ_PAIR);
  set_int(monitor, ZMQ_LINGER, 0);
  if (zmq_connect(monitor, monitor_endpoint.c_str()) != 0) zmq_fail("connect monitor");
  if (zmq_connect(dealer, endpoint.c_str()) != 0) zmq_fail("connect " + endpoint);
}

bool ZmqLink::send(const OutgoingFrame& frame) {
  // A device or strided tensor is staged, and waited for, before any part goes: a failed copy
  // throws with nothing of the frame queued.
  std::vector<HostStaging> staged;  // by tensor, once one needs it
  for (size_t i = 0; i < frame.tensors.size(); ++i)
    if (part_needs_staging(frame.tensors[i])) {
      staged.resize(frame.tensors.size());
      staged[i] = stage_to_host(frame.tensors[i]);
      staged[i].synchronize("send: a device tensor's bytes to the network");
    }
  const FrameHeader& h = *frame.header;
  void* dealer = peer(frame.dst).dealer;
  uint8_t header[512];
  encode_header_into(h, header);
  const size_t parts = frame.parts();
  send_bytes_part(dealer, header, header_size(h.shape.size()), parts == 0 ? 0 : ZMQ_SNDMORE, frame.dst);
  // The call frame's bytes are copied (small); each tensor goes by reference. done rides on the
  // last part: it finishes when ZeroMQ lets that go, or now if it was copied.
  if (frame.head.data())
    send_bytes_part(dealer, frame.head.data(), frame.head.size(), parts == 1 ? 0 : ZMQ_SNDMORE, frame.dst);
  bool by_reference = false;
  for (size_t i = 0; i < frame.tensors.size(); ++i) {
    const bool last = i + 1 == frame.tensors.size();
    const Tensor& host = !staged.empty() && staged[i].host.defined() ? staged[i].host : frame.tensors[i];
    by_reference = send_tensor_part(dealer, host, last ? 0 : ZMQ_SNDMORE, last ? frame.done : nullptr, frame.dst);
  }
  if (frame.done && !by_reference) frame.done->finish();
  return true;
}

void ZmqLink::send_header(int r, const FrameHeader& h) {
  uint8_t buffer[512];
  encode_header_into(h, buffer);
  zmq_send(peer(r).dealer, buffer, header_size(h.shape.size()), ZMQ_DONTWAIT);
}

int ZmqLink::receive() {
  int handled = 0;
  while (true) {
    // A frame is [routing id, header, parts...]; multipart messages arrive whole, so once the
    // first part is here the rest are too.
    zmq_msg_t identity, header;
    zmq_msg_init(&identity);
    zmq_msg_init(&header);
    if (zmq_msg_recv(&identity, router_, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&identity);
      zmq_msg_close(&header);
      return handled;
    }
    bool more = zmq_msg_more(&identity);
    const bool has_header = more && zmq_msg_recv(&header, router_, 0) >= 0;
    more = has_header && zmq_msg_more(&header);
    std::vector<Tensor> parts;
    while (more) {
      zmq_msg_t part;
      zmq_msg_init(&part);
      if (zmq_msg_recv(&part, router_, 0) < 0) {
        zmq_msg_close(&part);
        break;
      }
      more = zmq_msg_more(&part);
      // Past the most a frame may have, parts are drained and only counted: the sink refuses it.
      if (parts.size() <= 1 + kMaxActorParts) parts.push_back(adopt_part(&part));
      zmq_msg_close(&part);
    }
    const int peer = rank_of_routing_id(&identity, world_size_);
    if (peer < 0 || peer == rank_) {
      sink_.drop();  // not one of our ranks (with CURVE, nobody unauthenticated gets here)
    } else {
      // A rank's connection: not a stranger's when it closes (read_router_monitor).
      if (const int fd = has_header ? zmq_msg_get(&header, ZMQ_SRCFD) : -1;
          fd >= 0 && rank_fd_[peer].load(std::memory_order_relaxed) != fd)
        rank_fd_[peer].store(fd, std::memory_order_relaxed);
      const auto* bytes = static_cast<const uint8_t*>(zmq_msg_data(&header));
      handled += sink_.accept(peer, zmq_path, {bytes, has_header ? zmq_msg_size(&header) : 0}, std::move(parts));
    }
    zmq_msg_close(&identity);
    zmq_msg_close(&header);
  }
}

void ZmqLink::answer_zap() { answer_zap_requests(zap_, *curve_); }

void ZmqLink::read_monitor(int r) {
  void* monitor = peer(r).monitor;
  zmq_msg_t event, endpoint;
  zmq_msg_init(&event);
  zmq_msg_init(&endpoint);
  if (zmq_msg_recv(&event, monitor, ZMQ_DONTWAIT) >= 0) {
    if (zmq_msg_more(&event)) zmq_msg_recv(&endpoint, monitor, 0);
    uint16_t id = 0;
    if (zmq_msg_size(&event) >= 2) std::memcpy(&id, zmq_msg_data(&event), 2);
    if (id == ZMQ_EVENT_DISCONNECTED) sink_.suspect(r);
  }
  zmq_msg_close(&event);
  zmq_msg_close(&endpoint);
}

void ZmqLink::read_router_monitor() {
  zmq_msg_t event, endpoint;
  zmq_msg_init(&event);
  zmq_msg_init(&endpoint);
  while (zmq_msg_recv(&event, router_monitor_, ZMQ_DONTWAIT) >= 0) {
    if (zmq_msg_more(&event)) zmq_msg_recv(&endpoint, router_monitor_, 0);
    if (zmq_msg_size(&event) < 6) continue;
    uint16_t id = 0;
    uint32_t value = 0;  // the connection's fd (accepted, closed), or why its handshake failed
    std::memcpy(&id, zmq_msg_data(&event), 2);
    std::memcpy(&value, static_cast<const char*>(zmq_msg_data(&event)) + 2, 4);
    const int fd = static_cast<int>(value);
    if (id == ZMQ_EVENT_ACCEPTED) {
      accepted_[fd] = peer_address(fd);
    } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
      char code[16];
      std::snprintf(code, sizeof code, "%#x", value);  // zmq.h's ZMQ_PROTOCOL_ERROR_*: ZMTP, CURVE, ZAP
      handshake_failure_ = std::string("ZeroMQ handshake refused (protocol error ") + code + ")";
    } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
      handshake_failure_ = "ZeroMQ handshake refused: its CURVE key is not the job's (another job secret; ZAP status " +
                           std::to_string(value) + ")";
    } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
      handshake_failure_ = "no ZeroMQ handshake within TROUPE_HANDSHAKE_TIMEOUT_MS (or the peer left)";
    } else if (id == ZMQ_EVENT_DISCONNECTED) {
      const auto it = accepted_.find(fd);
      const bool known = it != accepted_.end();
      const std::string address = known ? it->second : "?";
      if (known) accepted_.erase(it);
      bool rank = false;
      for (int r = 0; r < world_size_; ++r) {
        int expected = fd;
        rank = rank || rank_fd_[r].compare_exchange_strong(expected, -1);
      }
      if (!rank && known)
        log_cut_off(address, !handshake_failure_.empty()
                                 ? handshake_failure_
                                 : "closed by the ROUTER (a message part over TROUPE_MAX_FRAME_BYTES, no message "
                                   "within TROUPE_PROGRESS_TIMEOUT_MS) or by the peer");
      handshake_failure_.clear();
    }
  }
  zmq_msg_close(&event);
  zmq_msg_close(&endpoint);
}

void ZmqLink::close_receiving() {
  if (router_monitor_) {
    if (router_) zmq_socket_monitor(router_, nullptr, 0);
    zmq_close(std::exchange(router_monitor_, nullptr));
  }
  for (Peer& p : peers_)
    if (p.monitor) zmq_close(std::exchange(p.monitor, nullptr));
  if (router_) zmq_close(std::exchange(router_, nullptr));
  if (zap_) zmq_close(std::exchange(zap_, nullptr));
}

void ZmqLink::close_dealer(int r, int linger_ms) {
  void*& dealer = peer(r).dealer;
  if (!dealer) return;
  set_int(dealer, ZMQ_LINGER, linger_ms);
  zmq_close(std::exchange(dealer, nullptr));
}

}  // namespace troupe::net
