// The transport's stripes (net/stripes.h): large frames cross several connections at once and
// arrive whole, in their turn among the peer's other frames, with their bytes where the tensors
// need them; malformed chunks break the transport with CommError naming the rank.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <thread>

#include "devices/error.h"
#include "devices/lane.h"
#include "net/direct_link.h"
#include "net/stripes.h"
#include "net/transport.h"
#include "tests/net/transport_pair.h"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

// n values i + k * step: a chunk placed at the wrong offset shows.
Tensor ramp(int64_t n, float start) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) v[static_cast<size_t>(k)] = start + static_cast<float>(k % 100000);
  return Tensor::from_vector(v, {n});
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  out.insert(out.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 4);
}
void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  out.insert(out.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 8);
}

// A chunk as rank 1 would write it on a stripe (stripes.h, "Wire").
std::vector<uint8_t> chunk(uint64_t seq, uint64_t total, uint64_t offset, uint64_t length, uint32_t header_bytes,
                           std::vector<uint64_t> part_sizes) {
  std::vector<uint8_t> out;
  put_u64(out, seq);
  put_u64(out, total);
  put_u64(out, offset);
  put_u64(out, length);
  put_u32(out, header_bytes);
  put_u32(out, static_cast<uint32_t>(part_sizes.size()));
  for (uint64_t s : part_sizes) put_u64(out, s);
  out.resize(out.size() + header_bytes, 0);
  return out;
}

// Rank 0 of 2 (never connected) receiving one hand-made stripe from "rank 1": the error it breaks with.
std::string refusal(const std::vector<uint8_t>& bytes, int lane = 1) {
  Transport t(unconnected_rank0());
  auto slot = t.post(0, net::Inbox::p2p, 1, -1);
  const int fd = dial_direct(t.address().direct, 1, 0, lane, JobKeys{}, deadline_after(5s));
  return refusal_of(t, slot, fd, bytes);
}

// A TCP connection from `from` to a listener on `to` (loopback addresses): {dialing end, accepted end}.
std::pair<int, int> tcp_connection(const char* from, const char* to) {
  auto address = [](const char* ip) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    ::inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
  };
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in at = address(to);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
  REQUIRE(::listen(listener, 1) == 0);
  socklen_t len = sizeof at;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&at), &len);
  const int dialer = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in here = address(from);
  REQUIRE(::bind(dialer, reinterpret_cast<sockaddr*>(&here), sizeof here) == 0);
  REQUIRE(::connect(dialer, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
  const int accepted = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  REQUIRE(accepted >= 0);
  return {dialer, accepted};
}

}  // namespace

TEST_CASE("stripes: connections within one host get cache-sized socket buffers, others the kernel's", "[net][stripes]") {
  // Both ends on 127.0.0.1: one host. 127.0.0.1 to 127.0.0.2 stands for two hosts (different addresses).
  const long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
  const int expected = l2 > 0 ? static_cast<int>(std::min<long>(l2 / 2, 8 << 20)) : 256 << 10;
  auto [a, b] = tcp_connection("127.0.0.1", "127.0.0.1");
  CHECK(same_address_both_ends(a));
  CHECK(same_address_both_ends(b));
  CHECK(stripe_socket_buffer(a) == expected);
  CHECK(stripe_socket_buffer(b) == expected);
  auto [c, d] = tcp_connection("127.0.0.1", "127.0.0.2");
  CHECK_FALSE(same_address_both_ends(c));
  CHECK_FALSE(same_address_both_ends(d));
  CHECK(stripe_socket_buffer(c) == 0);
  CHECK(stripe_socket_buffer(-1) == 0);  // not a socket: nothing to tune
  for (int fd : {a, b, c, d}) ::close(fd);
}

TEST_CASE("stripes: large frames arrive whole and in their turn among small and medium ones", "[net][stripes]") {
  TransportPair p = connect_pair("tcp", {}, {});
  // Sizes cycle through direct (12 B), ZeroMQ (256 KiB) and striped (4 MiB + an odd float).
  const int64_t sizes[] = {3, 1 << 16, (1 << 20) + 1};
  constexpr int kFrames = 30;
  for (int i = 0; i < kFrames; ++i) p.a->send(1, data_header(5), ramp(sizes[i % 3], float(i)));
  for (int i = 0; i < kFrames; ++i) {
    Tensor got = receive(*p.b, 5, 0);
    REQUIRE(got.numel() == sizes[i % 3]);
    CHECK(got.to_vector<float>() == ramp(sizes[i % 3], float(i)).to_vector<float>());
  }
  CHECK(p.b->striped_frames() == kFrames / 3);
  CHECK(p.b->direct_frames() == kFrames / 3);

  // Any dtype and shape, and a striped frame's storage is aligned for its dtype.
  Tensor wide = Tensor::full({3, 1 << 17, 5}, -2.5, DType::f64);
  p.b->send(0, data_header(6), wide);
  Tensor back = receive(*p.a, 6, 1);
  CHECK(back.dtype() == DType::f64);
  CHECK(back.shape() == Shape({3, 1 << 17, 5}));
  CHECK(reinterpret_cast<uintptr_t>(back.raw_data()) % 64 == 0);
  CHECK(back.to_vector<double>() == wide.to_vector<double>());
  CHECK(p.a->striped_frames() == 1);
}

TEST_CASE("stripes: an actor frame's tensors come as parts at 64-byte boundaries", "[net][stripes]") {
  TransportPair p = connect_pair("tcp", {}, {});
  std::promise<Message> got;
  auto handler = std::make_shared<ActorHandler>();
  handler->on_frame = [&](Message&& m) { got.set_value(std::move(m)); };
  handler->on_peer_lost = [](int, std::exception_ptr) {};
  p.b->set_actor_handler(handler);
  const std::vector<uint8_t> call = {1, 2, 3, 4, 5};  // the transport does not read it
  const Tensor t1 = Tensor::full({(1 << 19) + 3}, 7.0, DType::f32);
  const Tensor t2 = Tensor::from_vector<int64_t>({1, 2, 3}, {3});
  p.a->send_actor_frame(1, call, {t1, t2});
  auto future = got.get_future();
  REQUIRE(future.wait_for(20s) == std::future_status::ready);
  Message m = future.get();
  CHECK(p.b->striped_frames() == 1);
  REQUIRE(m.payload.numel() == 5);
  CHECK(m.payload.to_vector<uint8_t>() == call);
  REQUIRE(m.parts.size() == 2);
  CHECK(m.parts[0].nbytes() == t1.nbytes());
  CHECK(m.parts[1].nbytes() == t2.nbytes());
  for (const Tensor& part : m.parts) CHECK(reinterpret_cast<uintptr_t>(part.raw_data()) % 64 == 0);
  CHECK(std::memcmp(m.parts[0].raw_data(), t1.raw_data(), t1.nbytes()) == 0);
  CHECK(std::memcmp(m.parts[1].raw_data(), t2.raw_data(), t2.nbytes()) == 0);
}

TEST_CASE("stripes: off, or below stripe_min, large frames take ZeroMQ, and a send completes once its lanes wrote",
          "[net][stripes]") {
  TransportOptions off;
  off.stripes = 0;
  TransportOptions high;
  high.stripe_min = 64 << 20;
  for (const auto& [a, b] : {std::pair{off, off}, std::pair{high, TransportOptions{}}}) {
    TransportPair p = connect_pair("tcp", a, b);
    p.a->send(1, data_header(2), ramp(1 << 20, 1.0f));
    CHECK(receive(*p.b, 2, 0).to_vector<float>() == ramp(1 << 20, 1.0f).to_vector<float>());
    CHECK(p.b->striped_frames() == 0);
  }
  // A receiver with stripes off still takes a striping sender's lanes.
  TransportPair p = connect_pair("tcp", {}, off);
  auto done = std::make_shared<net::detail::Completion>();
  p.a->send(1, data_header(2), ramp(1 << 21, 2.0f), done);
  CHECK(receive(*p.b, 2, 0).to_vector<float>() == ramp(1 << 21, 2.0f).to_vector<float>());
  CHECK(done->wait_until(deadline_after(10s)));
  CHECK(p.b->striped_frames() == 1);

  TransportOptions too_many;
  too_many.stripes = kMaxStripes + 1;
  CHECK_THROWS_AS(Transport(too_many), ValueError);
}

TEST_CASE("stripes: malformed chunks break the transport with CommError naming the rank", "[net][stripes]") {
  CHECK_THAT(refusal(chunk(0, uint64_t(1) << 40, 0, 8, 100, {8})), Catch::Contains("rank 1") && Catch::Contains("bytes (at most"));
  CHECK_THAT(refusal(chunk(0, 1000, 900, 200, 0, {})), Catch::Contains("bytes 900+200 of a frame of 1000"));
  CHECK_THAT(refusal(chunk(0, 1000, 64, 10, 100, {1000})), Catch::Contains("at offset 64 with a header"));
  CHECK_THAT(refusal(chunk(0, 1000, 0, 10, 100, {10, 10})), Catch::Contains("parts that do not fill"));
  CHECK_THAT(refusal({}, kMaxStripes + 1), Catch::Contains("introduced path 1 lane 9"));
  // A sender that goes quiet in the middle of a chunk is cut off once it made no progress for the
  // stall timeout (the peer timeout, 3 s), not waited for forever.
  std::vector<uint8_t> cut = chunk(0, 4096, 0, 4096, 100, {4096});
  cut.resize(cut.size() + 1000);
  CHECK_THAT(refusal(cut), Catch::Contains("cut short"));
}

// The gates of a device tensor's copy to host (devices/host_staging.h), here a host lane's events:
// a lane writes each piece of the frame only once its event is done, and a failed piece's error
// fails the send and cuts the connection, so the receiver never takes the frame.
namespace {

struct GatedSend {
  Transport receiver{unconnected_rank0()};
  std::shared_ptr<Transport::Slot> slot = receiver.post(0, net::Inbox::p2p, 7, 1);
  StripeSenders out{2, [](int) {}};
  std::unique_ptr<troupe::Lane> writer = troupe::Lane::make(Device::cpu(), "writer");
  std::shared_ptr<net::detail::Completion> done = std::make_shared<net::detail::Completion>();

  GatedSend() { REQUIRE(out.connect(0, receiver.address().direct, 1, JobKeys{}, deadline_after(5s))); }

  // Sends x as rank 1's frame 0 on tag 7, its bytes gated by `gates`.
  void send(const Tensor& x, const PartGates& gates) {
    FrameHeader h = data_header(7);
    h.source = 1;
    h.seq = 0;
    h.dtype = x.dtype();
    h.shape = x.shape();
    h.payload_bytes = x.nbytes();
    std::vector<uint8_t> header(header_size(h.shape.size()));
    encode_header_into(h, header.data());
    const std::span<const uint8_t> bytes{static_cast<const uint8_t*>(x.raw_data()), static_cast<size_t>(x.nbytes())};
    out.send(0, 0, header, {&bytes, 1}, {&gates, 1}, nullptr, done);
  }
};

}  // namespace

TEST_CASE("stripes: a part still being written goes out piece by piece, each once its event is done",
          "[net][stripes]") {
  GatedSend s;
  constexpr int64_t n = int64_t(1) << 20, quarter = n / 4;
  Tensor x = Tensor::zeros({n});
  float* p = x.mutable_data<float>();
  // The frame is queued before any of its bytes is written: the lanes must wait for each piece.
  s.writer->enqueue([] { std::this_thread::sleep_for(50ms); });
  PartGates gates;
  for (int64_t k = 0; k < 4; ++k) {
    s.writer->enqueue([p, k] {
      for (int64_t i = k * quarter; i < (k + 1) * quarter; ++i) p[i] = static_cast<float>(i % 1000 + k);
    });
    gates.emplace_back(static_cast<uint64_t>((k + 1) * quarter) * sizeof(float), s.writer->record());
  }
  s.send(x, gates);
  std::optional<Message> m = s.receiver.wait(s.slot, deadline_after(20s));
  REQUIRE(m);
  const float* got = m->payload.data<float>();
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += got[i] != static_cast<float>(i % 1000 + i / quarter);
  CHECK(wrong == 0);
  CHECK(s.done->wait_until(deadline_after(5s)));
}

TEST_CASE("stripes: a piece whose work failed fails the send with its error and the frame never arrives",
          "[net][stripes]") {
  GatedSend s;
  Tensor x = Tensor::ones({int64_t(1) << 20});
  PartGates gates;
  gates.emplace_back(x.nbytes() / 2, s.writer->record());
  s.writer->enqueue([] { throw ValueError("copy: the device faulted"); });
  gates.emplace_back(x.nbytes(), s.writer->record());
  s.send(x, gates);
  CHECK_THROWS_WITH(s.done->wait_until(deadline_after(10s)), Catch::Contains("the device faulted"));
  std::optional<Message> m;
  try {
    m = s.receiver.wait(s.slot, deadline_after(2s));
  } catch (const CommError&) {
  }
  CHECK_FALSE(m);
  CHECK_THROWS_AS(s.writer->synchronize("test"), ValueError);
}
