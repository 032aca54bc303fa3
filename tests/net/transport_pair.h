#pragma once
// Two connected transports in one process (ranks 0 and 1), for the transport's tests.
//
//   TransportOptions a, b;  // rank, world size and prefer are set here
//   TransportPair p = connect_pair("tcp", a, b);
//   p.a->send(1, header, tensor);
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <memory>
#include <span>
#include <string>

#include "devices/error.h"
#include "net/errors.h"
#include "net/transport.h"

namespace troupe::net {

struct TransportPair {
  std::unique_ptr<Transport> a, b;
};

// Rank 0 from oa, rank 1 from ob (their rank and world size are set here). Rethrows rank 0's
// connect error first.
inline TransportPair connect_pair(const std::string& prefer, TransportOptions oa, TransportOptions ob,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  oa.world_size = ob.world_size = 2;
  oa.rank = 0;
  ob.rank = 1;
  oa.prefer = ob.prefer = prefer;
  TransportPair p{std::make_unique<Transport>(oa), std::make_unique<Transport>(ob)};
  const std::vector<PeerAddress> table = {p.a->address(), p.b->address()};
  auto other = std::async(std::launch::async, [&] { p.b->connect(table, deadline_after(timeout)); });
  std::exception_ptr first;
  try {
    p.a->connect(table, deadline_after(timeout));
  } catch (...) {
    first = std::current_exception();
  }
  std::exception_ptr second;
  try {
    other.get();
  } catch (...) {
    second = std::current_exception();
  }
  if (first || second) std::rethrow_exception(first ? first : second);
  return p;
}

// A p2p frame header on `tag` (the transport fills in the rest from the payload).
inline FrameHeader data_header(int64_t tag) {
  FrameHeader h;
  h.kind = FrameKind::data;
  h.tag = tag;
  return h;
}

// The next p2p message on `tag` from `source`, or its payload; TimeoutError after `timeout`.
inline Message receive_message(Transport& t, int64_t tag, int source,
                               std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto m = t.wait(t.post(0, Inbox::p2p, tag, source), deadline_after(timeout));
  if (!m) throw TimeoutError("test: nothing arrived");
  return std::move(*m);
}
inline Tensor receive(Transport& t, int64_t tag, int source, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  return receive_message(t, tag, source, timeout).payload;
}

// Rank 0 of 2 over tcp://, never connected: for feeding a transport frames by hand.
inline TransportOptions unconnected_rank0() {
  TransportOptions o;
  o.world_size = 2;
  o.prefer = "tcp";
  return o;
}

// Sends bytes on fd, a connection dialed to t's direct port, and says how t's posted receive slot
// ended: the CommError's message when the transport refused what came, "nothing" when it took it.
template <class Slot>
std::string refusal_of(Transport& t, const Slot& slot, int fd, std::span<const uint8_t> bytes) {
  ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  std::string what;
  try {
    t.wait(slot, deadline_after(std::chrono::seconds(10)));
    what = "nothing";
  } catch (const CommError& e) {
    what = e.what();
  }
  ::close(fd);
  return what;
}

}  // namespace troupe::net
