#include "net/zap_handler.h"

#include <zmq.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "net/zmq_socket.h"

namespace troupe::net {

void* bind_zap_handler(void* context) {
  void* zap = zmq_socket(context, ZMQ_REP);
  if (!zap) zmq_fail("ZAP handler socket");
  set_int(zap, ZMQ_LINGER, 0);
  if (zmq_bind(zap, "inproc://zeromq.zap.01") != 0) {
    zmq_close(zap);
    zmq_fail("bind ZAP handler");
  }
  return zap;
}

void answer_zap_requests(void* zap, const CurveKeys& keys) {
  while (true) {
    // ZAP request: version, request id, domain, address, identity, mechanism, credentials...
    std::vector<std::string> parts;
    while (true) {
      zmq_msg_t part;
      zmq_msg_init(&part);
      if (zmq_msg_recv(&part, zap, parts.empty() ? ZMQ_DONTWAIT : 0) < 0) {
        zmq_msg_close(&part);
        if (parts.empty()) return;
        break;
      }
      parts.emplace_back(static_cast<const char*>(zmq_msg_data(&part)), zmq_msg_size(&part));
      const bool more = zmq_msg_more(&part);
      zmq_msg_close(&part);
      if (!more) break;
    }
    bool allowed = false;
    if (parts.size() >= 7 && parts[5] == "CURVE" && parts[6].size() == 32) {
      uint8_t expected[32];
      zmq_z85_decode(expected, keys.public_key.c_str());
      allowed = std::memcmp(expected, parts[6].data(), 32) == 0;
    }
    const std::string request_id = parts.size() > 1 ? parts[1] : "";
    const std::string reply[] = {"1.0", request_id, allowed ? "200" : "400", allowed ? "OK" : "not this job's key", "", ""};
    for (size_t i = 0; i < 6; ++i) zmq_send(zap, reply[i].data(), reply[i].size(), i < 5 ? ZMQ_SNDMORE : 0);
  }
}

}  // namespace troupe::net
