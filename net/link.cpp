#include "net/link.h"

#include <string>

namespace troupe::net {

LinkTraffic::LinkTraffic(int peer, Path path) {
  static const char* const names[kPaths] = {"zmq", "direct", "stripes"};
  const metrics::Labels labels{{"peer", std::to_string(peer)}, {"path", names[path]}};
  sent_bytes_ = &metrics::counter("troupe_transport_sent_bytes_total", "Bytes sent to a peer, headers included", labels);
  sent_frames_ = &metrics::counter("troupe_transport_sent_frames_total", "Frames sent to a peer", labels);
  received_bytes_ =
      &metrics::counter("troupe_transport_received_bytes_total", "Bytes received from a peer, headers included", labels);
  received_frames_ = &metrics::counter("troupe_transport_received_frames_total", "Frames received from a peer", labels);
}

}  // namespace troupe::net
