// The transport's direct links (net/direct_link.h): one connection per pair carries small frames
// both ways, past ZeroMQ, large ones do not take it, and a peer's frames arrive in the order sent
// whichever path each took; a sender never blocks on a full socket; strangers and malformed
// records are refused as on the ROUTER.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <future>
#include <thread>

#include "devices/error.h"
#include "net/direct_link.h"
#include "net/transport.h"
#include "tests/net/transport_pair.h"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

namespace {


// n f32 values, all equal to value: small (n <= ~16k) go direct, large through ZeroMQ.
Tensor filled(int64_t n, float value) { return Tensor::full({n}, value); }

}  // namespace

TEST_CASE("direct link: small frames skip ZeroMQ, large ones do not, the order per peer holds", "[net][direct]") {
  for (const char* prefer : {"tcp", "auto"}) {
    TransportPair p = connect_pair(prefer, {}, {});
    CHECK(p.a->direct_links() == 1);
    CHECK(p.b->direct_links() == 1);
    CHECK(p.a->address().direct.rfind("127.0.0.1:", 0) == 0);
    // Alternating sizes on one tag: every large frame (ZeroMQ, behind its I/O thread) is
    // followed by small ones (direct, faster) that must not overtake it.
    constexpr int kFrames = 200;
    for (int i = 0; i < kFrames; ++i) p.a->send(1, data_header(7), filled(i % 3 == 0 ? 1 << 18 : 3, float(i)));
    for (int i = 0; i < kFrames; ++i) {
      Tensor got = receive(*p.b, 7, 0);
      REQUIRE(got.numel() == (i % 3 == 0 ? 1 << 18 : 3));
      CHECK(got.to_vector<float>().front() == float(i));
      CHECK(got.to_vector<float>().back() == float(i));
    }
    CHECK(p.b->direct_frames() == kFrames - (kFrames + 2) / 3);
    // The other way.
    p.b->send(0, data_header(8), Tensor::from_vector<int64_t>({5, 6}, {2}));
    CHECK(receive(*p.a, 8, 1).to_vector<int64_t>() == std::vector<int64_t>({5, 6}));
    CHECK(p.a->direct_frames() == 1);
  }
}

TEST_CASE("direct link: one connection carries records both ways and closes with the last of its ends",
          "[net][direct]") {
  DirectListener listener("127.0.0.1");
  const JobKeys keys = derive_job_keys(generate_job_secret());
  // The dialer waits for the handshake's challenge: the accepting end answers meanwhile.
  auto dialed = std::async(std::launch::async, [&] {
    return std::make_unique<DirectSender>(listener.endpoint(), /*self=*/0, /*peer=*/1, keys, deadline_after(5s));
  });
  int fd = -1;
  for (int i = 0; i < 500 && fd < 0; ++i) {
    pollfd p{listener.fd(), POLLIN, 0};
    ::poll(&p, 1, 10);
    fd = listener.accept();
  }
  REQUIRE(fd >= 0);
  auto in = std::make_unique<DirectReceiver>(fd, /*self=*/1, /*world_size=*/2, keys);
  for (int i = 0; i < 500 && in->peer() < 0; ++i) {
    REQUIRE(in->read([](const DirectRecord&) { FAIL("a record before the handshake ended"); }));
    std::this_thread::sleep_for(1ms);
  }
  REQUIRE(in->peer() == 0);
  std::unique_ptr<DirectSender> dialer = dialed.get();
  DirectSender& out = *dialer;
  std::vector<std::string> got;
  const auto keep = [&](const DirectRecord& r) {
    got.emplace_back(r.header.begin(), r.header.end());
    for (const auto& part : r.parts) got.back() += "+" + std::string(part.begin(), part.end());
  };
  const auto read_until = [&](DirectReceiver& receiver, size_t records) {
    for (int i = 0; i < 500 && got.size() < records; ++i) {
      REQUIRE(receiver.read(keep));
      std::this_thread::sleep_for(1ms);
    }
    REQUIRE(got.size() == records);
  };
  const auto bytes = [](const std::string& text) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  };
  const std::string request = "request", payload = "4 bytes", answer = "answer";
  const std::span<const uint8_t> parts[] = {bytes(payload)};
  out.send(bytes(request), parts);
  read_until(*in, 1);
  CHECK(got[0] == "request+4 bytes");
  CHECK(in->peer() == 0);
  CHECK(in->stripe() == 0);

  // The answer goes back on the same connection: no handshake, the dialing end knows its peer.
  auto back = std::make_unique<DirectSender>(in->shared_fd());
  DirectReceiver replies(out.shared_fd(), /*self=*/0, /*world_size=*/2, /*peer=*/1);
  CHECK(back->fd() == in->fd());
  back->send(bytes(answer), {});
  got.clear();
  read_until(replies, 1);
  CHECK(got[0] == "answer");
  CHECK(replies.peer() == 1);

  // The accepting end's receiver gone, its sender still writes: the connection stays open.
  in.reset();
  back->send(bytes(answer), {});
  got.clear();
  read_until(replies, 1);
  // The last end gone: the dialing end sees the connection close.
  back.reset();
  bool open = true;
  for (int i = 0; i < 500 && open; ++i) {
    open = replies.read(keep);
    std::this_thread::sleep_for(1ms);
  }
  CHECK_FALSE(open);
}

TEST_CASE("direct link: a sender never blocks on a full socket, and what it keeps goes out in order", "[net][direct]") {
  TransportPair p = connect_pair("tcp", {}, {});
  // ~64 MB of 60 KB frames, far beyond the socket buffers, while rank 1 reads nothing yet.
  constexpr int kFrames = 1000;
  const auto start = Clock::now();
  for (int i = 0; i < kFrames; ++i) p.a->send(1, data_header(3), filled(15000, float(i)));
  const auto took = Clock::now() - start;
  INFO("sending took " << std::chrono::duration<double>(took).count() << " s");
  for (int i = 0; i < kFrames; ++i) {
    Tensor got = receive(*p.b, 3, 0);
    REQUIRE(got.numel() == 15000);
    REQUIRE(got.to_vector<float>()[14999] == float(i));
  }
  CHECK(p.b->direct_frames() == kFrames);
}

TEST_CASE("direct link: a peer that takes none of the kept bytes is stalled since the first was kept", "[net][direct]") {
  // A connection past its handshake, whose other end nobody reads.
  int ends[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, ends) == 0);
  DirectSender out(share_fd(ends[0]));
  std::vector<uint8_t> header(72, 0);
  const std::vector<uint8_t> bytes(60'000, 7);
  const std::span<const uint8_t> part(bytes);
  // Nobody reads the other end: the socket buffers fill (the kernel grows them for a while), the
  // sender keeps the rest, and then no byte moves: the stall goes on from when it began.
  Clock::time_point since;
  bool still = false;
  for (int i = 0; i < 500 && !still; ++i) {
    while (!out.backlogged() && !out.send(header, {&part, 1})) {
    }
    since = out.stalled_since();
    std::this_thread::sleep_for(10ms);
    still = out.flush() && out.stalled_since() == since;
  }
  REQUIRE(still);
  std::this_thread::sleep_for(20ms);
  CHECK(out.flush());
  CHECK(out.stalled_since() == since);
  // Once the peer reads, the kept bytes move and the stall ends.
  const int fd = ends[1];
  std::vector<uint8_t> sink(1 << 20);
  while (::recv(fd, sink.data(), sink.size(), MSG_DONTWAIT) > 0) {
  }
  out.flush();
  CHECK(out.stalled_since() > since);
  ::close(fd);
}

TEST_CASE("direct link: off with direct_max 0, the frames then all take ZeroMQ", "[net][direct]") {
  TransportOptions off;
  off.direct_max = 0;
  TransportPair p = connect_pair("tcp", off, off);
  CHECK(p.a->address().direct.empty());
  CHECK(p.a->direct_links() == 0);
  p.a->send(1, data_header(1), filled(3, 2.0f));
  CHECK(receive(*p.b, 1, 0).to_vector<float>() == std::vector<float>({2, 2, 2}));
  CHECK(p.b->direct_frames() == 0);

  // One side without direct links: neither sends on one (rank 0 has nowhere to connect to, rank 1
  // takes no connection), and both still talk through ZeroMQ.
  TransportPair q = connect_pair("tcp", {}, off);
  CHECK(q.a->direct_links() == 0);
  CHECK(q.b->direct_links() == 0);
  q.a->send(1, data_header(1), filled(3, 3.0f));
  CHECK(receive(*q.b, 1, 0).to_vector<float>() == std::vector<float>({3, 3, 3}));
  q.b->send(0, data_header(1), filled(3, 4.0f));
  CHECK(receive(*q.a, 1, 1).to_vector<float>() == std::vector<float>({4, 4, 4}));

  TransportOptions too_big;
  too_big.direct_max = kDirectRecordMax;
  CHECK_THROWS_AS(Transport(too_big), ValueError);
}

TEST_CASE("direct link: strangers are dropped, a rank's malformed record breaks it with CommError", "[net][direct]") {
  Transport t(unconnected_rank0());
  auto slot = t.post(0, Inbox::p2p, 1, -1);
  const std::string endpoint = t.address().direct;
  REQUIRE_FALSE(endpoint.empty());

  {  // Not a direct link at all.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons(static_cast<uint16_t>(std::stoi(endpoint.substr(endpoint.rfind(':') + 1))));
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0);
    // Longer than a hello, so the listener judges it at once.
    const char garbage[] = "GET /index.html HTTP/1.0\r\nHost: 127.0.0.1\r\nUser-Agent: not-a-rank/1.0\r\nAccept: */*\r\n\r\n";
    REQUIRE(::send(fd, garbage, sizeof garbage, 0) == sizeof garbage);
    for (int i = 0; i < 200 && t.dropped_frames() == 0; ++i) std::this_thread::sleep_for(10ms);
    ::close(fd);
  }
  CHECK(t.dropped_frames() == 1);
  CHECK_FALSE(t.is_ready(*slot));
  {  // Introduced as rank 0 (the transport itself): refused too, and the dialer hears it.
    CHECK_THROWS_WITH(DirectSender(endpoint, 0, 0, JobKeys{}, deadline_after(5s)), Catch::Contains("closed"));
    for (int i = 0; i < 200 && t.dropped_frames() < 2; ++i) std::this_thread::sleep_for(10ms);
  }
  CHECK(t.dropped_frames() == 2);
  CHECK_NOTHROW(t.check_healthy());

  DirectSender rank1(endpoint, 1, 0, JobKeys{}, deadline_after(5s));
  const uint8_t not_a_header[] = {1, 2, 3, 4, 5, 6, 7, 8};
  rank1.send(not_a_header, {});
  CHECK_THROWS_AS(t.wait(slot, deadline_after(5s)), CommError);
  CHECK_THROWS_WITH(t.check_healthy(), Catch::Contains("rank 1 sent a bad frame"));
}

TEST_CASE("direct link: a record's lengths are checked before use", "[net][direct]") {
  Transport t(unconnected_rank0());
  auto slot = t.post(0, Inbox::p2p, 1, -1);
  DirectSender rank1(t.address().direct, 1, 0, JobKeys{}, deadline_after(5s));
  // One part claiming 2 GB: refused from its length, without waiting for (or allocating) it.
  std::vector<uint8_t> lengths = {16, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0x80, 0, 0, 0, 0};
  const int fd = rank1.fd();
  REQUIRE(::send(fd, lengths.data(), lengths.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(lengths.size()));
  CHECK_THROWS_WITH(t.wait(slot, deadline_after(5s)), Catch::Contains("longer than"));
}

TEST_CASE("peer address: the direct endpoint is optional on the wire", "[net][direct]") {
  const PeerAddress old = PeerAddress::parse("tcp://10.0.0.1:5|ipc:///tmp/x.sock|host");
  CHECK(old.direct.empty());
  CHECK(old.serialize() == "tcp://10.0.0.1:5|ipc:///tmp/x.sock|host");
  const PeerAddress now = PeerAddress::parse("tcp://10.0.0.1:5||host|10.0.0.1:6");
  CHECK(now.direct == "10.0.0.1:6");
  CHECK(PeerAddress::parse(now.serialize()).direct == "10.0.0.1:6");
  CHECK_THROWS_AS(PeerAddress::parse("a|b|c|d|e"), CommError);
  CHECK_THROWS_AS(PeerAddress::parse("a|b"), CommError);
  CHECK_THROWS_AS(PeerAddress::parse("a|b|c|"), CommError);  // would not serialize back to itself
}
