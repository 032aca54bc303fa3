// Sealed records (net/sealed_stream.h), the AEAD of an encrypted job's direct links and stripes:
// what is sealed opens bit for bit and only once, in order; a nonce never repeats under a key; a
// record altered on the wire is refused, and on a real direct link or stripe that breaks it with a
// CommError naming the peer's rank and address; an encrypted pair of transports carries frames
// over its direct link and stripes, bit for bit; a stripe's body records out of order, or longer
// than its chunk has left, are refused.
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <future>
#include <thread>
#include <set>
#include <string>
#include <vector>

#include "devices/error.h"
#include "net/direct_link.h"
#include "net/sealed_stream.h"
#include "net/transport.h"
#include "net/wire_bytes.h"
#include "tests/net/transport_pair.h"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

SealKey key_of(uint8_t seed) {
  SealKey k;
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(seed * 31 + i);
  return k;
}

std::vector<uint8_t> bytes_of(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

// Opens the record at the front of wire (length, ciphertext, tag) with opener.
std::vector<uint8_t> open_front(RecordOpener& opener, const std::vector<uint8_t>& wire) {
  const uint32_t n = sealed_length(wire.data());
  std::vector<uint8_t> plain(n);
  opener.open(wire.data(), {wire.data() + kSealedLengthBytes, n + kSealTagBytes}, plain.data());
  return plain;
}

}  // namespace

TEST_CASE("sealed records: pieces open as one record, bit for bit, in order", "[net][sealed]") {
  RecordSealer sealer(key_of(1));
  RecordOpener opener(key_of(1));
  for (size_t n : {size_t(0), size_t(1), size_t(17), size_t(100000)}) {
    const auto a = bytes_of(n, 3), b = bytes_of(n / 2 + 1, 9);
    const std::span<const uint8_t> pieces[] = {a, b};
    std::vector<uint8_t> wire;
    sealer.seal(pieces, wire);
    REQUIRE(wire.size() == kSealedLengthBytes + a.size() + b.size() + kSealTagBytes);
    std::vector<uint8_t> expected = a;
    expected.insert(expected.end(), b.begin(), b.end());
    CHECK(open_front(opener, wire) == expected);
  }
  CHECK(sealer.records() == 4);
  CHECK(opener.records() == 4);
}

TEST_CASE("sealed records: sealed into a kept buffer they open alike; a buffer too small is refused", "[net][sealed]") {
  RecordSealer sealer(key_of(6));
  RecordOpener opener(key_of(6));
  std::vector<uint8_t> kept(sealed_record_bytes(1000));
  for (size_t n : {size_t(1000), size_t(0), size_t(333)}) {
    const auto a = bytes_of(n, 8);
    const std::span<const uint8_t> pieces[] = {a};
    REQUIRE(sealer.seal_into(pieces, kept) == sealed_record_bytes(n));
    const std::vector<uint8_t> wire(kept.begin(), kept.begin() + sealed_record_bytes(n));
    CHECK(open_front(opener, wire) == a);
  }
  const auto big = bytes_of(1001, 1);
  const std::span<const uint8_t> pieces[] = {big};
  CHECK_THROWS_WITH(sealer.seal_into(pieces, kept), Catch::Contains("room for a record of 1021"));
  CHECK(sealer.records() == 3);  // a refused record takes no number
}

TEST_CASE("sealed records: a nonce never repeats, so a record opens once and in its place only", "[net][sealed]") {
  RecordSealer sealer(key_of(2));
  const auto plain = bytes_of(64, 5);
  // The same bytes sealed again under the same key come out different: each record has its own nonce.
  std::set<std::string> seen;  // of bytes as text (GCC 12 misreads a set of byte vectors' compare)
  std::vector<std::vector<uint8_t>> records;
  for (int i = 0; i < 100; ++i) {
    std::vector<uint8_t> wire;
    sealer.seal(plain, wire);
    CHECK(seen.insert(std::string(wire.begin(), wire.end())).second);
    records.push_back(wire);
  }
  CHECK(sealer.records() == 100);
  // A replayed record (the opener counted past it) and a reordered one fail.
  RecordOpener opener(key_of(2));
  CHECK(open_front(opener, records[0]) == plain);
  CHECK_THROWS_WITH(open_front(opener, records[0]), Catch::Contains("failed authentication"));
  RecordOpener other(key_of(2));
  CHECK_THROWS_WITH(open_front(other, records[2]), Catch::Contains("failed authentication"));
  // The other direction's key opens nothing.
  RecordOpener wrong_key(key_of(3));
  CHECK_THROWS_WITH(open_front(wrong_key, records[0]), Catch::Contains("failed authentication"));
  // A key seals at most kSealedRecordsMax records: the last number is used once, then refused.
  RecordSealer last(key_of(4), kSealedRecordsMax - 1);
  std::vector<uint8_t> wire;
  last.seal(plain, wire);
  RecordOpener last_open(key_of(4), kSealedRecordsMax - 1);
  CHECK(open_front(last_open, wire) == plain);
  CHECK_THROWS_WITH(last.seal(plain, wire), Catch::Contains("the most one key may"));
}

TEST_CASE("sealed records: a flipped bit anywhere, or a length past the limit, is refused", "[net][sealed]") {
  RecordSealer sealer(key_of(5));
  std::vector<uint8_t> wire;
  sealer.seal(bytes_of(40, 1), wire);
  for (size_t at : {size_t(0), kSealedLengthBytes, kSealedLengthBytes + 39, wire.size() - 1}) {
    std::vector<uint8_t> tampered = wire;
    tampered[at] ^= 0x01;
    RecordOpener opener(key_of(5));
    CHECK_THROWS_AS(open_front(opener, tampered), CommError);
  }
  std::vector<uint8_t> huge(kSealedLengthBytes);
  huge[3] = 0xff;
  CHECK_THROWS_WITH(sealed_length(huge.data()), Catch::Contains("at most"));
}

TEST_CASE("sealed records: a tampered record on a direct link breaks it, naming the peer's rank and address",
          "[net][sealed]") {
  DirectListener listener("127.0.0.1");
  const JobKeys keys = derive_job_keys(generate_job_secret());
  SessionKeys dialer;
  auto dialed = std::async(std::launch::async, [&] {
    return dial_direct(listener.endpoint(), 0, 1, 0, keys, deadline_after(5s), &dialer);
  });
  int fd = -1;
  for (auto until = deadline_after(5s); fd < 0 && Clock::now() < until; fd = listener.accept())
    std::this_thread::sleep_for(1ms);
  REQUIRE(fd >= 0);
  DirectReceiver in(fd, /*self=*/1, /*world_size=*/2, keys, /*encrypt=*/true);
  std::vector<std::vector<uint8_t>> got;
  auto collect = [&](const DirectRecord& r) { got.push_back(std::vector<uint8_t>(r.parts.at(0).begin(), r.parts.at(0).end())); };
  while (dialed.wait_for(1ms) != std::future_status::ready) CHECK(in.read(collect));
  DirectSender out(share_fd(dialed.get()), dialer);
  for (auto until = deadline_after(5s); in.peer() < 0 && Clock::now() < until; std::this_thread::sleep_for(1ms))
    CHECK(in.read(collect));  // the proof may come after the dialer is done
  REQUIRE(in.session().has_value());
  CHECK(in.session()->receive == dialer.send);

  // A good record, then one whose ciphertext was altered on the way.
  const auto payload = bytes_of(3000, 11);
  const uint8_t header[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::span<const uint8_t> parts[] = {payload};
  out.send(header, parts);
  RecordSealer forger(dialer.send, /*first_record=*/1);  // the next record's number, the right key
  std::vector<uint8_t> plain(8 + 8 + sizeof header);
  plain[0] = sizeof header;
  plain[4] = 1;
  plain[8] = 1;
  plain.push_back(42);
  std::vector<uint8_t> wire;
  forger.seal(plain, wire);
  wire[kSealedLengthBytes + 20] ^= 0x80;
  REQUIRE(::send(*out.shared_fd(), wire.data(), wire.size(), MSG_NOSIGNAL) == ssize_t(wire.size()));
  std::string why;
  for (auto until = deadline_after(5s); why.empty() && Clock::now() < until; std::this_thread::sleep_for(1ms)) {
    try {
      in.read(collect);
    } catch (const CommError& e) {
      why = e.what();
    }
  }
  REQUIRE(got.size() == 1);
  CHECK(got[0] == payload);
  CHECK_THAT(why, Catch::Contains("from rank 0") && Catch::Contains("127.0.0.1:") &&
                      Catch::Contains("failed authentication"));
}

TEST_CASE("sealed records: an encrypted pair sends over its direct link and stripes, bit for bit", "[net][sealed]") {
  TransportOptions encrypted;
  encrypted.keys = derive_job_keys(generate_job_secret());
  encrypted.encrypt = true;
  TransportPair p = connect_pair("tcp", encrypted, encrypted);
  CHECK(p.a->direct_links() == 1);
  CHECK(p.b->direct_links() == 1);
  // Direct (12 B), ZeroMQ under CURVE (256 KiB), striped (4 MiB + a float): each bit for bit.
  const int64_t sizes[] = {3, 1 << 16, (1 << 20) + 1};
  constexpr int kFrames = 9;
  auto values = [](int64_t n, int i) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) v[static_cast<size_t>(k)] = float(k % 1000) * 0.37f + float(i);
    return Tensor::from_vector<float>(v, {n});
  };
  for (int i = 0; i < kFrames; ++i) p.a->send(1, data_header(5), values(sizes[i % 3], i));
  for (int i = 0; i < kFrames; ++i) {
    Tensor got = receive_message(*p.b, 5, 0).payload;
    const Tensor expected = values(sizes[i % 3], i);
    REQUIRE(got.numel() == expected.numel());
    CHECK(std::memcmp(got.raw_data(), expected.raw_data(), expected.nbytes()) == 0);
  }
  CHECK(p.b->direct_frames() == kFrames / 3);
  CHECK(p.b->striped_frames() == kFrames / 3);
  // And back, on the connections the other rank dialed.
  p.b->send(0, data_header(6), values(3, 7));
  p.b->send(0, data_header(6), values((1 << 20) + 1, 8));
  CHECK(receive_message(*p.a, 6, 1).payload.to_vector<float>() == values(3, 7).to_vector<float>());
  CHECK(receive_message(*p.a, 6, 1).payload.to_vector<float>() == values((1 << 20) + 1, 8).to_vector<float>());
  CHECK(p.a->direct_frames() == 1);
  CHECK(p.a->striped_frames() == 1);
}

namespace {

// Rank 0 of an encrypted pair (never connected) taking one stripe from "rank 1", which dials with
// `seal` (or says it does not seal) and writes `wire`: the error rank 0 breaks with.
std::string stripe_refusal(bool seal, const std::function<std::vector<uint8_t>(const SessionKeys&)>& wire) {
  TransportOptions o = unconnected_rank0();
  o.keys = derive_job_keys(generate_job_secret());
  o.encrypt = true;
  Transport t(o);
  auto slot = t.post(0, Inbox::p2p, 1, -1);
  SessionKeys session;
  const int fd = dial_direct(t.address().direct, 1, 0, /*lane=*/1, *o.keys, deadline_after(5s), seal ? &session : nullptr);
  return refusal_of(t, slot, fd, wire(session));
}

}  // namespace

TEST_CASE("sealed records: a stripe's tampered chunk, or a stripe that does not seal, breaks it with CommError",
          "[net][sealed]") {
  // A chunk head (40 bytes) sealed with the right key and number, one bit flipped on the way.
  const std::string tampered = stripe_refusal(true, [](const SessionKeys& k) {
    RecordSealer sealer(k.send);
    std::vector<uint8_t> wire;
    sealer.seal(bytes_of(40, 2), wire);
    wire[kSealedLengthBytes + 3] ^= 0x04;
    return wire;
  });
  CHECK_THAT(tampered, Catch::Contains("rank 1") && Catch::Contains("127.0.0.1:") &&
                           Catch::Contains("failed authentication"));
  const std::string plain = stripe_refusal(false, [](const SessionKeys&) { return bytes_of(40, 2); });
  CHECK_THAT(plain, Catch::Contains("rank 1 does not seal its records"));
}

TEST_CASE("sealed records: a stripe's body records swapped, or one longer than its chunk has left, break it",
          "[net][sealed]") {
  // One chunk carrying a whole frame of 2048 bytes (one part) after a valid head: its body as two
  // records of 1024 bytes, each read together with the next one's length field.
  constexpr uint64_t kTotal = 2048;
  constexpr uint32_t kHeaderBytes = 8;
  auto head = [] {
    std::vector<uint8_t> h(40 + 8 + kHeaderBytes, 0);
    wire::put<uint64_t>(h.data(), 8, kTotal);   // seq 0, total
    wire::put<uint64_t>(h.data(), 24, kTotal);  // offset 0, length
    wire::put<uint32_t>(h.data(), 32, kHeaderBytes);
    wire::put<uint32_t>(h.data(), 36, 1);       // one part, of every byte
    wire::put<uint64_t>(h.data(), 40, kTotal);
    return h;
  };
  const auto body = bytes_of(kTotal, 4);
  const std::span<const uint8_t> first(body.data(), kTotal / 2), second(body.data() + kTotal / 2, kTotal / 2);
  const std::string swapped = stripe_refusal(true, [&](const SessionKeys& k) {
    RecordSealer sealer(k.send);
    std::vector<uint8_t> wire, later;
    sealer.seal(head(), wire);
    sealer.seal(first, later);  // record 1, sent after record 2
    sealer.seal(second, wire);
    wire.insert(wire.end(), later.begin(), later.end());
    return wire;
  });
  CHECK_THAT(swapped, Catch::Contains("rank 1") && Catch::Contains("sealed record 1 failed authentication"));
  const std::string too_long = stripe_refusal(true, [&](const SessionKeys& k) {
    RecordSealer sealer(k.send);
    std::vector<uint8_t> wire;
    sealer.seal(head(), wire);
    sealer.seal(bytes_of(kTotal + 1, 5), wire);
    return wire;
  });
  CHECK_THAT(too_long, Catch::Contains("a record of 2049 bytes where 2048 are to come"));
}
