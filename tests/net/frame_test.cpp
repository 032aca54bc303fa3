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
  CHECK(bytes.size() == header_size(FrameKind::collective, 3));
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
  check_malformed(with([](auto& b) { b[5] = 9; }), payload, "unknown kind 9");
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
  check_malformed(b, 4, "actor frame must carry a u8 call frame");

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

namespace {

// A dataflow frame with the given part and payload (dtype and shape; payload bytes follow).
FrameHeader dataflow_frame(DataflowHeader part, DType dtype = DType::u8, Shape shape = {0}) {
  FrameHeader h;
  h.kind = FrameKind::dataflow;
  h.group = 3;
  h.seq = 5;
  h.tag = 2;  // the channel id
  h.source = 1;
  h.dtype = dtype;
  h.shape = shape;
  h.payload_bytes = itemsize(dtype) * numel(shape);
  h.dataflow = part;
  return h;
}

}  // namespace

TEST_CASE("frame: dataflow headers round-trip for every message", "[net][frame]") {
  const std::vector<FrameHeader> frames = {
      dataflow_frame({.message = DataflowMessage::start, .invocation = 7}),
      dataflow_frame({DataflowMessage::data, 7, 3, 1, true}, DType::f32, {2}),
      dataflow_frame({DataflowMessage::data, 7, -1, 0, false}),  // a dead token for graph output 0
      dataflow_frame({DataflowMessage::data, 8, 0, 0, true}, DType::i64, {0, 3}),  // an empty live value
      dataflow_frame({.message = DataflowMessage::ack, .invocation = 7}),
      dataflow_frame({.message = DataflowMessage::ack, .invocation = 7, .error = true}, DType::u8, {5}),
      dataflow_frame({.message = DataflowMessage::stop}),
  };
  for (const FrameHeader& h : frames) {
    INFO(name(h.dataflow.message));
    auto bytes = encode_header(h);
    CHECK(bytes.size() == header_size(FrameKind::dataflow, h.shape.size()));
    CHECK(bytes.size() == 72 + 8 * h.shape.size() + kDataflowHeaderBytes);
    FrameHeader back = decode_header(bytes.data(), bytes.size(), h.payload_bytes, 2);
    CHECK(back.kind == FrameKind::dataflow);
    CHECK(back.tag == h.tag);
    CHECK(back.dataflow == h.dataflow);
    CHECK(encode_header(back) == bytes);
  }
}

TEST_CASE("frame: every malformed dataflow field is a CommError", "[net][frame]") {
  const FrameHeader h = dataflow_frame({DataflowMessage::data, 9, 3, 1, true}, DType::f32, {2});
  const auto good = encode_header(h);
  const size_t at = 72 + 8;  // the dataflow part, after one dim
  auto with = [&](auto edit) {
    auto b = good;
    edit(b);
    return b;
  };
  REQUIRE_NOTHROW(decode_header(good.data(), good.size(), 8, 2));
  for (size_t n = at; n < good.size(); ++n) CHECK_THROWS_AS(decode_header(good.data(), n, 8, 2), CommError);
  check_malformed(with([](auto& b) { b.push_back(0); }), 8, "expected 104", 2);
  check_malformed(with([&](auto& b) { b[at] = 0; }), 8, "unknown message 0", 2);
  check_malformed(with([&](auto& b) { b[at] = 5; }), 8, "unknown message 5", 2);
  check_malformed(with([&](auto& b) { b[at + 1] = 5; }), 8, "unknown flags 5", 2);
  check_malformed(with([&](auto& b) { b[at + 2] = 1; }), 8, "reserved bytes", 2);
  check_malformed(with([&](auto& b) { b[at + 15] = 1; }), 8, "reserved bytes", 2);
  check_malformed(with([&](auto& b) { poke<int32_t>(b, at + 4, -2); }), 8, "data for node -2 slot 1", 2);
  check_malformed(with([&](auto& b) { poke<int32_t>(b, at + 8, -1); }), 8, "data for node 3 slot -1", 2);
  check_malformed(with([&](auto& b) { b[at + 1] = 0; }), 8, "data (dead token) message with 8 payload bytes", 2);
  check_malformed(with([&](auto& b) { b[at + 1] = 3; }), 8, "data message flagged as an error", 2);

  auto check = [](const FrameHeader& frame, const char* what) {
    const auto b = encode_header(frame);
    check_malformed(b, frame.payload_bytes, what, 2);
  };
  check(dataflow_frame({DataflowMessage::start, 1, 1, 0}), "start message names node 1 slot 0");
  check(dataflow_frame({DataflowMessage::ack, 1, 0, 2}), "ack message names node 0 slot 2");
  check(dataflow_frame({.message = DataflowMessage::start, .invocation = 1, .live = true}), "start message flagged live");
  check(dataflow_frame({.message = DataflowMessage::stop, .invocation = 5}), "stop message names invocation 5");
  check(dataflow_frame({.message = DataflowMessage::stop}, DType::u8, {3}), "stop message with 3 payload bytes");
  check(dataflow_frame({.message = DataflowMessage::ack, .invocation = 1}, DType::u8, {5}),
        "ack message with 5 payload bytes");
  check(dataflow_frame({.message = DataflowMessage::ack, .invocation = 1, .error = true}, DType::f32, {2}),
        "a failed ack must carry its error as u8 text");
  check(dataflow_frame({.message = DataflowMessage::ack, .invocation = 1, .error = true}),
        "a failed ack must carry its error as u8 text");
}

TEST_CASE("frame: mutated dataflow frames decode consistently or are CommErrors", "[net][frame]") {
  std::mt19937_64 rng(99);
  const std::vector<FrameHeader> seeds = {
      dataflow_frame({DataflowMessage::data, 7, 3, 1, true}, DType::f32, {2, 2}),
      dataflow_frame({.message = DataflowMessage::ack, .invocation = 7, .error = true}, DType::u8, {5}),
      dataflow_frame({.message = DataflowMessage::stop}),
  };
  int decoded = 0, rejected = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    const FrameHeader& seed = seeds[rng() % seeds.size()];
    std::vector<uint8_t> bytes = encode_header(seed);
    // Mostly the dataflow part (the last 24 bytes), sometimes anywhere.
    for (int k = 0, n = 1 + rng() % 3; k < n; ++k) {
      const size_t span = rng() % 4 == 0 ? bytes.size() : kDataflowHeaderBytes;
      bytes[bytes.size() - 1 - rng() % span] = static_cast<uint8_t>(rng() % 8 == 0 ? rng() : rng() % 6);
    }
    try {
      FrameHeader h = decode_header(bytes.data(), bytes.size(), seed.payload_bytes, 2);
      CHECK(encode_header(h) == bytes);
      ++decoded;
    } catch (const CommError&) {
      ++rejected;
    }
  }
  CHECK(decoded + rejected == 2000);
  CHECK(decoded > 0);
  CHECK(rejected > 0);
}
