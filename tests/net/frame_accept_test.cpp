// Every path a frame can take into a transport (its ROUTER, a direct link, a stripe) hands it to
// one acceptance routine: the same malformed frame is refused with the same error on each.
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "devices/error.h"
#include "net/direct_link.h"
#include "net/transport.h"
#include "tests/net/transport_pair.h"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

// A header that is no frame header (all zeros), and a payload for it.
const std::vector<uint8_t> kBadHeader(100, 0);
const std::vector<uint8_t> kPayload(128, 7);

using Parts = std::vector<std::vector<uint8_t>>;

// What rank 0 (of 2, never connected) breaks with once "rank 1" sent something: its error text.
std::string refusal(Transport& t, const std::shared_ptr<Transport::Slot>& slot) {
  try {
    t.wait(slot, deadline_after(10s));
    return "nothing";
  } catch (const CommError& e) {
    return e.what();
  }
}

void append_u64(std::vector<uint8_t>& out, uint64_t v) {
  out.resize(out.size() + 8);
  std::memcpy(out.data() + out.size() - 8, &v, 8);
}

// One frame from "rank 1" on each path, as that path carries it.
std::string refused_on_router(const std::vector<uint8_t>& header, const Parts& parts) {
  Transport t(unconnected_rank0());
  auto slot = t.post(0, Inbox::p2p, 1, -1);
  void* context = zmq_ctx_new();
  void* s = zmq_socket(context, ZMQ_DEALER);
  std::string rank1 = "T";
  const int one = 1;
  rank1.append(reinterpret_cast<const char*>(&one), 4);
  zmq_setsockopt(s, ZMQ_ROUTING_ID, rank1.data(), rank1.size());
  zmq_connect(s, t.address().tcp.c_str());
  zmq_send(s, header.data(), header.size(), parts.empty() ? 0 : ZMQ_SNDMORE);
  for (size_t i = 0; i < parts.size(); ++i)
    zmq_send(s, parts[i].data(), parts[i].size(), i + 1 < parts.size() ? ZMQ_SNDMORE : 0);
  std::string what = refusal(t, slot);
  zmq_close(s);
  zmq_ctx_term(context);
  return what;
}

std::string refused_on_direct(const std::vector<uint8_t>& header, const Parts& parts) {
  Transport t(unconnected_rank0());
  auto slot = t.post(0, Inbox::p2p, 1, -1);
  DirectSender rank1(t.address().direct, 1, 0, JobKeys{}, deadline_after(5s));
  std::vector<std::span<const uint8_t>> spans(parts.begin(), parts.end());
  rank1.send(header, spans);
  return refusal(t, slot);
}

// One stripe carrying the whole frame (stripes.h, "Wire"): seq, total, offset, length, header
// bytes, part count, each part's bytes, the header, then the bytes.
std::string refused_on_stripe(const std::vector<uint8_t>& header, const std::vector<uint8_t>& payload) {
  Transport t(unconnected_rank0());
  auto slot = t.post(0, Inbox::p2p, 1, -1);
  std::vector<uint8_t> chunk;
  for (uint64_t v : {uint64_t(0), uint64_t(payload.size()), uint64_t(0), uint64_t(payload.size())}) append_u64(chunk, v);
  const uint32_t counts[] = {static_cast<uint32_t>(header.size()), 1};
  chunk.insert(chunk.end(), reinterpret_cast<const uint8_t*>(counts), reinterpret_cast<const uint8_t*>(counts) + 8);
  append_u64(chunk, payload.size());
  chunk.insert(chunk.end(), header.begin(), header.end());
  chunk.insert(chunk.end(), payload.begin(), payload.end());
  const int fd = dial_direct(t.address().direct, 1, 0, /*lane=*/1, JobKeys{}, deadline_after(5s));
  ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
  std::string what = refusal(t, slot);
  ::close(fd);
  return what;
}

}  // namespace

TEST_CASE("frame acceptance: a malformed frame is refused alike from the ROUTER, a direct link and a stripe",
          "[net][transport][direct][stripes]") {
  const std::string from_router = refused_on_router(kBadHeader, {kPayload});
  CHECK_THAT(from_router, Catch::Contains("transport: rank 1 sent a bad frame: frame: malformed: bad magic"));
  CHECK(refused_on_direct(kBadHeader, {kPayload}) == from_router);
  CHECK(refused_on_stripe(kBadHeader, kPayload) == from_router);
}

TEST_CASE("frame acceptance: extra parts on a frame that is not an actor frame are refused alike", "[net][transport][direct]") {
  // A valid data header for a 128-byte payload, followed by one part too many.
  FrameHeader h = data_header(1);
  h.source = 1;
  h.dtype = DType::u8;
  h.shape = {static_cast<int64_t>(kPayload.size())};
  h.payload_bytes = kPayload.size();
  const std::vector<uint8_t> header = encode_header(h);
  const std::string from_router = refused_on_router(header, {kPayload, kPayload});
  CHECK_THAT(from_router, Catch::Contains("rank 1 sent a bad frame: frame: malformed: a data frame of 2 parts"));
  CHECK(refused_on_direct(header, {kPayload, kPayload}) == from_router);
}
