#include "net/links/zmq_link.h"

#include <unistd.h>
#include <zmq.h>

#include <cstring>

#include "devices/error.h"
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
      dealers_(static_cast<size_t>(options.world_size), nullptr),
      monitors_(static_cast<size_t>(options.world_size), nullptr) {
  try {
    // The ZAP handler must exist before the ROUTER binds, or CURVE admits every client.
    if (curve_) zap_ = bind_zap_handler(context_);
    router_ = zmq_socket(context_, ZMQ_ROUTER);
    set_int(router_, ZMQ_RCVHWM, 0);
    set_int(router_, ZMQ_LINGER, 0);
    set_int(router_, ZMQ_ROUTER_HANDOVER, 1);
    if (curve_) {
      set_int(router_, ZMQ_CURVE_SERVER, 1);
      set_string(router_, ZMQ_CURVE_SECRETKEY, curve_->secret_key);
      set_string(router_, ZMQ_ZAP_DOMAIN, "troupe");
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
    size_t fd_size = sizeof router_fd_;
    if (zmq_getsockopt(router_, ZMQ_FD, &router_fd_, &fd_size) != 0) zmq_fail("ZMQ_FD");
  } catch (...) {
    close_receiving();
    throw;
  }
}

ZmqLink::~ZmqLink() {
  close_receiving();
  for (size_t r = 0; r < dealers_.size(); ++r)
    if (dealers_[r]) close_dealer(static_cast<int>(r), 0);
  if (!ipc_file_.empty()) ::unlink(ipc_file_.c_str());
}

void ZmqLink::connect(int r, const std::string& endpoint) {
  void*& dealer = dealers_[static_cast<size_t>(r)];
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
  void*& monitor = monitors_[static_cast<size_t>(r)];
  monitor = zmq_socket(context_, ZMQ_PAIR);
  set_int(monitor, ZMQ_LINGER, 0);
  if (zmq_connect(monitor, monitor_endpoint.c_str()) != 0) zmq_fail("connect monitor");
  if (zmq_connect(dealer, endpoint.c_str()) != 0) zmq_fail("connect " + endpoint);
}

bool ZmqLink::send(const OutgoingFrame& frame) {
  const FrameHeader& h = *frame.header;
  const std::vector<Tensor> parts = (*frame.owned)();
  void* dealer = dealers_[static_cast<size_t>(frame.dst)];
  uint8_t header[512];
  encode_header_into(h, header);
  send_bytes_part(dealer, header, header_size(h.shape.size()), parts.empty() ? 0 : ZMQ_SNDMORE, frame.dst);
  // done rides on the last part: it finishes when ZeroMQ lets that go, or now if it was copied.
  bool by_reference = false;
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    by_reference = send_tensor_part(dealer, parts[i], last ? 0 : ZMQ_SNDMORE, last ? frame.done : nullptr, frame.dst);
  }
  if (frame.done && !by_reference) frame.done->finish();
  return true;
}

void ZmqLink::send_header(int r, const FrameHeader& h) {
  uint8_t buffer[512];
  encode_header_into(h, buffer);
  zmq_send(dealers_[static_cast<size_t>(r)], buffer, header_size(h.shape.size()), ZMQ_DONTWAIT);
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
      const auto* bytes = static_cast<const uint8_t*>(zmq_msg_data(&header));
      handled += sink_.accept(peer, zmq_path, {bytes, has_header ? zmq_msg_size(&header) : 0}, std::move(parts));
    }
    zmq_msg_close(&identity);
    zmq_msg_close(&header);
  }
}

void ZmqLink::answer_zap() { answer_zap_requests(zap_, *curve_); }

void ZmqLink::read_monitor(int r) {
  void* monitor = monitors_[static_cast<size_t>(r)];
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

void ZmqLink::close_receiving() {
  for (void*& s : monitors_)
    if (s) zmq_close(std::exchange(s, nullptr));
  if (router_) zmq_close(std::exchange(router_, nullptr));
  if (zap_) zmq_close(std::exchange(zap_, nullptr));
}

void ZmqLink::close_dealer(int r, int linger_ms) {
  void*& dealer = dealers_[static_cast<size_t>(r)];
  if (!dealer) return;
  set_int(dealer, ZMQ_LINGER, linger_ms);
  zmq_close(std::exchange(dealer, nullptr));
}

}  // namespace troupe::net
