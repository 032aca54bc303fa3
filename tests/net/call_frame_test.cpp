// The remote actors' wire form and values: round trips, zero-copy tensors, every malformed field
// a CommError, the codecs' checks, and the names TROUPE_ACTOR gives methods.
#include <catch2/catch.hpp>
#include <cstring>

#include "net/remote/actor_type.h"
#include "devices/error_kinds.h"
#include "net/remote/call_frame.h"

using namespace troupe;
using namespace troupe::net;

namespace {

struct Config {
  int64_t hidden = 0;
  std::string name;
  std::vector<Tensor> weights;
  TROUPE_FIELDS(hidden, name, weights)
};

// What arrives: the bytes of each tensor as a u8 part, as the transport hands them over.
std::vector<Tensor> as_parts(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> parts;
  for (const Tensor& t : tensors)
    parts.emplace_back(t.storage(), DType::u8, Shape{static_cast<int64_t>(t.nbytes())}, Strides{1},
                       t.offset() * static_cast<int64_t>(itemsize(t.dtype())));
  return parts;
}

CallFrame round_trip(const CallFrame& call) {
  EncodedCall wire = encode_call(call);
  return decode_call(wire.bytes.data(), wire.bytes.size(), as_parts(wire.tensors));
}

CallFrame sample() {
  return {CallKind::request, 3, 17, "forward",
          WireValue::list({to_value(Tensor::arange(6).reshape({2, 3})), to_value(int64_t{-5}), to_value(2.5),
                       to_value(std::string("text")), to_value(true), WireValue(),
                       to_value(std::vector<Tensor>{Tensor::ones({0, 4}, DType::i64), Tensor::scalar<uint8_t>(7)})})};
}

template <class T>
void poke(std::vector<uint8_t>& b, size_t offset, T value) {
  std::memcpy(b.data() + offset, &value, sizeof(T));
}

void check_malformed(const std::vector<uint8_t>& bytes, const std::vector<Tensor>& parts, const std::string& part) {
  INFO("expecting: " << part);
  CHECK_THROWS_WITH(decode_call(bytes.data(), bytes.size(), parts), Catch::Contains("call frame: malformed") &&
                                                                            Catch::Contains(part));
  CHECK_THROWS_AS(decode_call(bytes.data(), bytes.size(), parts), CommError);
}

}  // namespace

TEST_CASE("call frame: every kind of value round-trips, tensors as views of the received bytes", "[net][remote]") {
  const CallFrame call = sample();
  EncodedCall wire = encode_call(call);
  REQUIRE(wire.tensors.size() == 3);
  const std::vector<Tensor> parts = as_parts(wire.tensors);
  const CallFrame back = decode_call(wire.bytes.data(), wire.bytes.size(), parts);
  CHECK(back.kind == CallKind::request);
  CHECK(back.actor == 3);
  CHECK(back.request == 17);
  CHECK(back.text == "forward");
  const WireValue::List& items = back.value.as_list();
  REQUIRE(items.size() == 7);
  const Tensor t = items[0].as_tensor();
  CHECK(t.meta().str() == "f32[2,3]");
  CHECK((t.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5}));
  CHECK(t.shares_storage_with(parts[0]));  // zero-copy: the part's bytes, not a copy
  CHECK(items[1].as_int() == -5);
  CHECK(items[2].as_real() == 2.5);
  CHECK(items[3].as_string() == "text");
  CHECK(items[4].as_bool());
  CHECK(items[5].is_none());
  const auto list = items[6].as<std::vector<Tensor>>();
  CHECK(list[0].meta().str() == "i64[0,4]");
  CHECK(list[1].item<uint8_t>() == 7);

  // A part at an odd address is copied into aligned memory for its dtype.
  Tensor bytes = Tensor::zeros({25}, DType::u8);
  std::memcpy(static_cast<uint8_t*>(bytes.mutable_raw_data()) + 1, wire.tensors[0].raw_data(), 24);
  std::vector<Tensor> odd = parts;
  odd[0] = bytes.slice(0, 1, 25);
  const CallFrame copied = decode_call(wire.bytes.data(), wire.bytes.size(), odd);
  const Tensor c = copied.value.as_list()[0].as_tensor();
  CHECK(!c.shares_storage_with(bytes));
  CHECK((c.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5}));

  // Every kind with what it must carry.
  CHECK(round_trip(CallFrame{CallKind::reply, 0, 9, "", WireValue()}).value.is_none());
  const std::string record = ErrorRecord{"ShapeError", "m"}.serialize();
  CHECK(round_trip(CallFrame{CallKind::failure, 0, 9, record, WireValue()}).text == record);
  CHECK(round_trip(CallFrame{CallKind::failure, 4, 0, record, WireValue()}).actor == 4);  // a tell's failure
  CHECK(round_trip(CallFrame{CallKind::down, 4, 0, "", WireValue()}).actor == 4);
  CHECK(round_trip(CallFrame{CallKind::done, 0, 0, "", WireValue()}).kind == CallKind::done);
  const WireValue spawn = WireValue::list(
      {WireValue(), WireValue::list({}), WireValue::integer(-1), WireValue::integer(0), WireValue::string("cuda:0")});
  CHECK(round_trip(CallFrame{CallKind::spawn, 0, 1, "xlmr.stage", spawn}).text == "xlmr.stage");
  // The sender's RemoteActors travels with every frame.
  CHECK(round_trip(CallFrame{CallKind::done, 0, 0, "", WireValue(), 7}).generation == 7);
}

TEST_CASE("call frame: every malformed field is a CommError", "[net][remote]") {
  EncodedCall wire = encode_call(sample());
  const std::vector<uint8_t>& good = wire.bytes;
  const std::vector<Tensor> parts = as_parts(wire.tensors);
  auto with = [&](auto edit) {
    auto b = good;
    edit(b);
    return b;
  };
  for (size_t n = 0; n < good.size(); ++n) CHECK_THROWS_AS(decode_call(good.data(), n, parts), CommError);
  check_malformed(with([](auto& b) { b.push_back(0); }), parts, "the header accounts for");
  check_malformed(with([](auto& b) { b[0] ^= 1; }), parts, "bad magic");
  check_malformed(with([](auto& b) { b[4] = 9; }), parts, "version 9");
  check_malformed(with([](auto& b) { b[5] = 0; }), parts, "unknown kind 0");
  check_malformed(with([](auto& b) { b[5] = 14; }), parts, "unknown kind 14");
  check_malformed(with([](auto& b) { b[6] = 1; }), parts, "reserved bytes");
  check_malformed(with([](auto& b) { poke<uint32_t>(b, 24, 1u << 21); }), parts, "text of 2097152 bytes");
  check_malformed(with([](auto& b) { poke<uint32_t>(b, 28, 5); }), parts, "the header accounts for");
  check_malformed(with([](auto& b) { poke<uint32_t>(b, 32, 2); }), parts, "header names 2 tensors, 3 came");
  check_malformed(good, {parts[0], parts[1]}, "header names 3 tensors, 2 came");
  std::vector<Tensor> short_part = parts;
  short_part[0] = parts[0].slice(0, 0, 20);
  check_malformed(good, short_part, "f32[2,3] needs 24 bytes, its part has 20");
  // The value starts after the 40-byte header and the 7-byte name: a list tag and its length.
  const size_t v = 40 + 7;
  check_malformed(with([&](auto& b) { b[v] = 8; }), parts, "unknown value tag 8");
  check_malformed(with([&](auto& b) { poke<uint32_t>(b, v + 1, 1000); }), parts, "a list's items needs 1000 bytes");
  check_malformed(with([&](auto& b) { poke<uint32_t>(b, v + 1, 6); }), parts, "bytes after the value");
  // The first item: tensor tag, dtype, rank, two dims.
  check_malformed(with([&](auto& b) { b[v + 6] = 99; }), parts, "unknown tensor dtype 99");
  check_malformed(with([&](auto& b) { b[v + 7] = 9; }), parts, "tensor rank 9 exceeds 8");
  check_malformed(with([&](auto& b) { poke<int64_t>(b, v + 8, -2); }), parts, "negative tensor dim -2");
  check_malformed(with([&](auto& b) { poke<int64_t>(b, v + 8, int64_t(1) << 62); }), parts, "overflows");

  // Nesting deeper than 32 lists, and strings longer than what is left.
  std::vector<uint8_t> deep(40, 0);
  for (int i = 0; i < 40; ++i) {
    deep.push_back(7);
    for (int k = 0; k < 4; ++k) deep.push_back(k == 0 ? 1 : 0);
  }
  deep.push_back(0);
  auto header = [](std::vector<uint8_t>& b, CallKind kind, uint64_t actor, uint64_t request, uint32_t text) {
    poke<uint32_t>(b, 0, kCallMagic);
    b[4] = kCallVersion;
    b[5] = static_cast<uint8_t>(kind);
    poke<uint64_t>(b, 8, actor);
    poke<uint64_t>(b, 16, request);
    poke<uint32_t>(b, 24, text);
    poke<uint32_t>(b, 28, static_cast<uint32_t>(b.size() - 40 - text));
  };
  header(deep, CallKind::reply, 0, 1, 0);
  check_malformed(deep, {}, "nested deeper than 32");
  std::vector<uint8_t> text(40, 0);
  for (int x : {5, 10, 0, 0, 0, int('a'), int('b')}) text.push_back(static_cast<uint8_t>(x));
  header(text, CallKind::reply, 0, 1, 0);
  check_malformed(text, {}, "a string needs 10 bytes, 2 left");

  // What each kind must carry.
  auto frame = [&](CallKind kind, uint64_t actor, uint64_t request, const std::string& name, const WireValue& value) {
    return encode_call({kind, actor, request, name, value}).bytes;
  };
  check_malformed(frame(CallKind::request, 0, 1, "m", WireValue::list({})), {}, "request without an actor id");
  check_malformed(frame(CallKind::request, 1, 0, "m", WireValue::list({})), {}, "request without a request id");
  check_malformed(frame(CallKind::tell, 1, 5, "m", WireValue::list({})), {}, "tell with a request id");
  check_malformed(frame(CallKind::request, 1, 1, "", WireValue::list({})), {}, "request without a name");
  check_malformed(frame(CallKind::request, 1, 1, "m", WireValue::integer(1)), {}, "request carrying an int");
  check_malformed(frame(CallKind::spawn, 0, 1, "t", WireValue::list({WireValue(), WireValue::list({})})), {},
                  "not [name, arguments");
  check_malformed(frame(CallKind::spawn, 0, 1, "t",
                        WireValue::list({WireValue(), WireValue::list({}), WireValue::integer(-1),
                                         WireValue::integer(0), WireValue::integer(0)})),
                  {}, "replaced id, device]");
  check_malformed(frame(CallKind::enroll, 1, 1, "n", WireValue::list({WireValue::string("t")})), {}, "not [type");
  check_malformed(frame(CallKind::failure, 0, 1, "no record", WireValue()), {}, "without an error record");
  check_malformed(frame(CallKind::failure, 0, 0, "no record", WireValue()), {}, "without a request id or an actor id");
}

TEST_CASE("values: codecs check what they decode", "[net][remote]") {
  const Config c{3, "stage", {Tensor::ones({2})}};
  const WireValue v = to_value(c);
  CHECK(v.describe() == "a list of 3");
  const Config back = v.as<Config>();
  CHECK(back.hidden == 3);
  CHECK(back.name == "stage");
  CHECK(back.weights.size() == 1);
  CHECK_THROWS_WITH(WireValue::list({WireValue::integer(1)}).as<Config>(), "expected 3 fields, got 1");
  CHECK_THROWS_WITH(WireValue::list({WireValue::integer(1), WireValue::integer(2), WireValue::list({})}).as<Config>(),
                    "field 2: expected a string, got an int");
  CHECK_THROWS_WITH(to_value(std::vector<int64_t>{1, 2}).as<std::vector<Tensor>>(),
                    "item 0: expected a tensor, got an int");
  CHECK_THROWS_WITH(to_value(int64_t{300}).as<uint8_t>(), "expected an int in [0, 255], got 300");
  CHECK_THROWS_AS(to_value(uint64_t(1) << 63), ValueError);
  CHECK(to_value(2).as<double>() == 2.0);  // ints widen to floats, not the other way
  CHECK_THROWS_AS(to_value(2.5).as<int>(), ValueError);
  CHECK(to_value(std::optional<int>()).is_none());
  CHECK(to_value(std::optional<int>(4)).as<std::optional<int>>() == 4);
  CHECK(to_value(std::make_pair(1, std::string("a"))).as<std::pair<int, std::string>>().second == "a");
  CHECK(std::get<1>(to_value(std::make_tuple(1, 2.5)).as<std::tuple<int, double>>()) == 2.5);
  CHECK(to_value("literal").as<std::string>() == "literal");
  CHECK_THROWS_WITH(to_value(Tensor()), Catch::Contains("undefined"));
  Tensor t = to_value(Tensor::ones({3}));  // the implicit conversion `Tensor y = wait(f)` uses
  CHECK(t.numel() == 3);
}

TEST_CASE("values: an error travels as a value and comes back as the same type", "[net][remote]") {
  CHECK(to_value(std::exception_ptr()).is_none());
  CHECK(WireValue().as<std::exception_ptr>() == nullptr);
  const WireValue v = to_value(std::make_exception_ptr(ShapeError("matmul: f32[2,3] @ f32[4,5]")));
  CHECK(v.describe() == "a list of 2");
  const EncodedCall wire = encode_call(CallFrame{CallKind::tell, 1, 0, "ack", v});  // as it crosses ranks
  const WireValue back = decode_call(wire.bytes.data(), wire.bytes.size(), {}).value;
  CHECK_THROWS_MATCHES(std::rethrow_exception(back.as<std::exception_ptr>()), ShapeError,
                       Catch::Message("matmul: f32[2,3] @ f32[4,5]"));
  CHECK_THROWS_MATCHES(std::rethrow_exception(to_value(std::make_exception_ptr(std::runtime_error("plain")))
                                                  .as<std::exception_ptr>()),
                       Error, Catch::Message("plain"));
  CHECK_THROWS_WITH(WireValue::string("ShapeError").as<std::exception_ptr>(), "expected a list, got a string");
  CHECK_THROWS_WITH(WireValue::list({WireValue::string(""), WireValue::string("m")}).as<std::exception_ptr>(),
                    Catch::Contains("an error's kind"));
}

TEST_CASE("actor types: methods answer to their member's name", "[net][remote]") {
  CHECK((net::detail::member_names("&Stage::forward, &Stage::calls") == std::vector<std::string>{"forward", "calls"}));
  CHECK((net::detail::member_names("&ns::Outer<int, 2>::step") == std::vector<std::string>{"step"}));
  CHECK(net::detail::member_names("").empty());
}
