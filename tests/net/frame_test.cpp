// The wire format: round trips, every malformed case, and a few thousand mutated frames.
#include <catch2/catch.hpp>
#include <cstring>
#include <limits>
#include <random>

#include "devices/error.h"
#include "net/frame.h"

using namespace troupe;
using namespace troupe::net;

namespace {

FrameHeader sample() {
  FrameHeader h;
  h.kind = FrameKind::collective;
  h.group = 0x1234567890abcdefull;
  h.seq = 41;
  h.tag = -7;
  h.source = 2;
  h.dtype = DType::f64;
  h.shape = {2, 3, 4};
  h.op = {CollectiveOp::all_reduce, ReduceOp::avg, DType::f64, 24, 9, 3};
  h.payload_bytes = 2 * 3 * 4 * 8;
  return h;
}

template <class T>
void poke(std::vector<uint8_t>& bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof value);
}

void check_malformed(const std::vector<uint8_t>& bytes, size_t payload, const char* what, int world = 4) {
  CHECK_THROWS_AS(decode_header(bytes.data(), bytes.size(), payload, world), CommError);
  CHECK_THROWS_WITH(decode_header(bytes.data(), bytes.size(), payload, world), Catch::Contains(what));
}

}  // namespace

TEST_CASE("frame: headers round-trip exactly", "[net][frame]") {
  FrameHeader h = sample();
  auto bytes = encode_header(h);
  CHECK(bytes.size() == header_size(3));
  CHECK(bytes.size() == 72 + 3 * 8);
  FrameHeader back = decode_header(bytes.data(), bytes.size(), h.payload_bytes, 4);
  CHECK(back.kind == h.kind);
  CHECK(back.group == h.group);
  CHECK(back.seq == h.seq);
  CHECK(back.tag == h.tag);
  CHECK(back.source == h.source);
  CHECK(back.dtype == h.dtype);
  CHECK(back.shape == h.shape);
  CHECK(back.op == h.op);
  CHECK(back.payload_bytes == h.payload_bytes);
  CHECK(encode_header(back) == bytes);

  // Every dtype, a scalar, an empty tensor, a heartbeat and a control frame.
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::boolean}) {
    FrameHeader s;
    s.dtype = t;
    s.shape = {};
    s.payload_bytes = itemsize(t);
    auto b = encode_header(s);
    CHECK(decode_header(b.data(), b.size(), itemsize(t), 1).dtype == t);
  }
  FrameHeader empty;
  empty.shape = {0, 5};
  empty.dtype = DType::f32;
  auto b = encode_header(empty);
  CHECK(decode_header(b.data(), b.size(), 0, 1).shape == Shape{0, 5});
  FrameHeader beat;
  beat.kind = FrameKind::heartbeat;
  beat.shape = {0};
  b = encode_header(beat);
  CHECK(decode_header(b.data(), b.size(), 0, 1).kind == FrameKind::heartbeat);
  FrameHeader control;
  control.kind = FrameKind::control;
  control.shape = {5};
  control.payload_bytes = 5;
  b = encode_header(control);
  CHECK(decode_header(b.data(), b.size(), 5, 1).kind == FrameKind::control);
}

TEST_CASE("frame: every malformed field is a CommError", "[net][frame]") {
  const FrameHeader h = sample();
  const auto good = encode_header(h);
  const size_t payload = h.payload_bytes;
  auto with = [&](auto edit) {
    auto b = good;
    edit(b);
    return b;
  };
  // Truncated anywhere, and one byte too long.
  for (size_t n = 0; n < good.size(); ++n)
    CHECK_THROWS_AS(decode_header(good.data(), n, payload, 4), CommError);
  check_malformed(std::vector<uint8_t>(good.begin(), good.begin() + 10), payload, "at least 72 expected");
  check_malformed(with([](auto& b) { b.push_back(0); }), payload, "expected 96");
  check_malformed(with([](auto& b) { b[0] ^= 1; }), payload, "bad magic");
  check_malformed(with([](auto& b) { b[4] = 2; }), payload, "version 2");
  check_malformed(with([](auto& b) { b[5] = 0; }), payload, "unknown kind 0");
  check_malformed(with([](auto& b) { b[5] = 7; }), payload, "unknown kind 7");  // FrameKind's gap
  check_malformed(with([](auto& b) { b[5] = 10; }), payload, "unknown kind 10");
  check_malformed(with([](auto& b) { b[6] = 8; }), payload, "unknown dtype 8");
  check_malformed(with([](auto& b) { b[7] = 9; }), payload, "rank 9 exceeds 8");
  check_malformed(with([](auto& b) { b[7] = 2; }), payload, "for rank 2");
  check_malformed(good, payload, "source rank 2 outside a world of 2", 2);
  check_malformed(with([](auto& b) { poke<int32_t>(b, 32, -1); }), payload, "source rank -1");
  check_malformed(with([](auto& b) { b[36] = 10; }), payload, "unknown collective op 10");
  check_malformed(with([](auto& b) { b[37] = 6; }), payload, "unknown reduce op 6");
  check_malformed(with([](auto& b) { b[38] = 200; }), payload, "unknown op dtype 200");
  check_malformed(with([](auto& b) { b[39] = 1; }), payload, "reserved byte");
  check_malformed(with([](auto& b) { poke<int32_t>(b, 64, 4); }), payload, "collective root 4 outside a world of 4");
  check_malformed(with([](auto& b) { poke<int32_t>(b, 64, -2); }), payload, "collective root -2");
  check_malformed(with([](auto& b) { b[70] = 1; }), payload, "reserved bytes 68..71");
  check_malformed(with([](auto& b) { poke<int64_t>(b, 72 + 8, -3); }), payload, "negative dim -3");
  check_malformed(with([](auto& b) { poke<int64_t>(b, 72, std::numeric_limits<int64_t>::max()); }), payload,
                  "overflows");
  check_malformed(with([](auto& b) { poke<int64_t>(b, 72, int64_t(1) << 40); poke<int64_t>(b, 80, int64_t(1) << 30); }),
                  payload, "overflows");
  check_malformed(with([](auto& b) { poke<uint64_t>(b, 56, 8); }), payload, "needs 192 bytes, header says 8");
  check_malformed(good, payload - 1, "received 191");
  check_malformed(good, payload + 1, "received 193");
  check_malformed(good, 0, "received 0");

  FrameHeader beat;
  beat.kind = FrameKind::heartbeat;
  beat.shape = {4};
  beat.payload_bytes = 4;
  auto b = encode_header(beat);
  check_malformed(b, 4, "heartbeat frame with 4 payload bytes");
  FrameHeader control;
  control.kind = FrameKind::control;
  control.dtype = DType::f32;
  control.shape = {1};
  control.payload_bytes = 4;
  b = encode_header(control);
  check_malformed(b, 4, "control frame must carry u8 text");
  FrameHeader actor;
  actor.kind = FrameKind::actor;
  actor.dtype = DType::i32;
  actor.shape = {1};
  actor.payload_bytes = 4;
  b = encode_header(actor);
  check_malformed(b, 4, "actor frame must carry u8 bytes");

  FrameHeader deep;
  deep.shape = Shape(9, 1);
  CHECK_THROWS_AS(encode_header(deep), CommError);
  CHECK_THROWS_WITH(encode_header(deep), Catch::Contains("rank 9"));
}

TEST_CASE("frame: thousands of random and mutated frames never crash the decoder", "[net][frame]") {
  std::mt19937_64 rng(1234);
  std::vector<std::vector<uint8_t>> seeds;
  std::vector<size_t> seed_payloads;
  for (int i = 0; i < 8; ++i) {
    FrameHeader h = sample();
    h.shape.resize(i % 9);
    for (auto& d : h.shape) d = 1 + rng() % 3;
    h.payload_bytes = itemsize(h.dtype) * numel(h.shape);
    seeds.push_back(encode_header(h));
    seed_payloads.push_back(h.payload_bytes);
  }
  int decoded = 0, rejected = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    const size_t pick = rng() % seeds.size();
    std::vector<uint8_t> bytes = seeds[pick];
    size_t payload = seed_payloads[pick];
    switch (rng() % 5) {
      case 0:  // flip a few bytes
        for (int k = 0, n = 1 + rng() % 4; k < n; ++k) bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
        break;
      case 1:  // truncate
        bytes.resize(rng() % bytes.size());
        break;
      case 2:  // extend with noise
        for (int k = 0, n = 1 + rng() % 16; k < n; ++k) bytes.push_back(static_cast<uint8_t>(rng()));
        break;
      case 3:  // pure noise of a plausible length
        bytes.resize(rng() % 160);
        for (auto& x : bytes) x = static_cast<uint8_t>(rng());
        break;
      case 4:  // a wrong payload length
        payload = rng() % 1024;
        break;
    }
    try {
      FrameHeader h = decode_header(bytes.data(), bytes.size(), payload, 4);
      // Whatever decodes is consistent and re-encodes to the same bytes.
      CHECK(h.payload_bytes == payload);
      CHECK(h.shape.size() <= kMaxFrameDims);
      CHECK(encode_header(h) == bytes);
      ++decoded;
    } catch (const CommError&) {
      ++rejected;
    }
  }
  CHECK(decoded + rejected == 4000);
  CHECK(rejected > 3000);
  CHECK(decoded > 0);  // mutations of the payload length or the group/tag bytes stay valid
}
