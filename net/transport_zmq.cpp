// The transport's ZeroMQ path (transport.h): a DEALER to each peer's ROUTER for the frames that
// take neither a direct link nor the stripes (all of them under CURVE), and this rank's ROUTER.
#include <zmq.h>

#include "devices/error.h"
#include "net/transport_internal.h"
#include "net/zmq_socket.h"

namespace troupe::net {

void Transport::connect_dealer(int r, const std::string& endpoint) {
  Peer& peer = *peers_[r];
  peer.dealer = zmq_socket(context_, ZMQ_DEALER);
  set_string(peer.dealer, ZMQ_ROUTING_ID, routing_id(rank()));
  set_int(peer.dealer, ZMQ_SNDHWM, 0);  // sends never block; tensors are queued by reference
  set_int(peer.dealer, ZMQ_LINGER, kLingerMs);
  if (options_.curve) {
    set_string(peer.dealer, ZMQ_CURVE_SERVERKEY, options_.curve->public_key);
    set_string(peer.dealer, ZMQ_CURVE_PUBLICKEY, options_.curve->public_key);
    set_string(peer.dealer, ZMQ_CURVE_SECRETKEY, options_.curve->secret_key);
  }
  const std::string monitor_endpoint = "inproc://troupe-monitor-" + std::to_string(r);
  if (zmq_socket_monitor(peer.dealer, monitor_endpoint.c_str(), ZMQ_EVENT_DISCONNECTED) != 0)
    zmq_fail("zmq_socket_monitor");
  peer.monitor = zmq_socket(context_, ZMQ_PAIR);
  set_int(peer.monitor, ZMQ_LINGER, 0);
  if (zmq_connect(peer.monitor, monitor_endpoint.c_str()) != 0) zmq_fail("connect monitor");
  if (zmq_connect(peer.dealer, endpoint.c_str()) != 0) zmq_fail("connect " + endpoint);
}

void Transport::send_zmq_locked(int dst, const FrameHeader& h, const std::vector<Tensor>& parts,
                                const std::shared_ptr<detail::Completion>& done) {
  void* dealer = peers_[dst]->dealer;
  uint8_t header[512];
  encode_header_into(h, header);
  send_bytes_part(dealer, header, header_size(h.shape.size()), parts.empty() ? 0 : ZMQ_SNDMORE, dst);
  // done rides on the last part: it finishes when ZeroMQ lets that go, or now if it was copied.
  bool by_reference = false;
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    by_reference = send_tensor_part(dealer, parts[i], last ? 0 : ZMQ_SNDMORE, last ? done : nullptr, dst);
  }
  if (done && !by_reference) done->finish();
}

int Transport::handle_router() {
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
      // Past the most a frame may have, parts are drained and only counted: accept_frame refuses it.
      if (parts.size() <= 1 + kMaxActorParts) parts.push_back(adopt_part(&part));
      zmq_msg_close(&part);
    }
    const int peer = rank_of_routing_id(&identity, world_size());
    if (peer < 0 || peer == rank()) {
      ++dropped_frames_;  // not one of our ranks (with CURVE, nobody unauthenticated gets here)
    } else {
      const auto* bytes = static_cast<const uint8_t*>(zmq_msg_data(&header));
      handled += accept_frame(peer, zmq_path, {bytes, has_header ? zmq_msg_size(&header) : 0}, std::move(parts));
    }
    zmq_msg_close(&identity);
    zmq_msg_close(&header);
  }
}

}  // namespace troupe::net
