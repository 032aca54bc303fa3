// An actor frame's tensors reach the peer as their values whichever link carries the frame: the
// transport hands them to the link as they are, and the link writes a contiguous host tensor from
// its own bytes and stages any other (a strided view here) itself.
#include <catch2/catch.hpp>

#include <cstring>
#include <future>

#include "devices/backend.h"
#include "net/transport.h"
#include "support/skip.h"
#include "tests/net/transport_pair.h"

namespace troupe::net {
namespace {

using namespace std::chrono_literals;

// Sends call bytes and the tensors from rank 0 to rank 1 as one actor frame; what rank 1 got.
Message send_and_receive(TransportPair& p, const std::vector<uint8_t>& call, const std::vector<Tensor>& tensors) {
  std::promise<Message> got;
  auto handler = std::make_shared<ActorHandler>();
  handler->on_frame = [&](Message&& m) { got.set_value(std::move(m)); };
  handler->on_peer_lost = [](int, std::exception_ptr) {};
  p.b->set_actor_handler(handler);
  p.a->send_actor_frame(1, call, tensors);
  auto future = got.get_future();
  REQUIRE(future.wait_for(20s) == std::future_status::ready);
  Message m = future.get();
  p.b->set_actor_handler(nullptr);
  return m;
}

void check_parts(const Message& m, const std::vector<uint8_t>& call, const std::vector<Tensor>& tensors) {
  CHECK(m.payload.to_vector<uint8_t>() == call);
  REQUIRE(m.parts.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor expected = tensors[i].to(Device::cpu()).contiguous();
    REQUIRE(m.parts[i].nbytes() == expected.nbytes());
    CHECK(std::memcmp(m.parts[i].raw_data(), expected.raw_data(), expected.nbytes()) == 0);
  }
}

}  // namespace

TEST_CASE("actor frames: strided and contiguous tensors arrive as their values by each link", "[net][transport]") {
  const std::vector<uint8_t> call = {9, 8, 7, 6};
  const Tensor small = Tensor::arange(12).reshape({3, 4});
  const std::vector<Tensor> small_parts = {small.transpose(0, 1), small, Tensor::arange(10, DType::i64).slice(0, 1, 9, 2)};
  REQUIRE_FALSE(small_parts[0].is_contiguous());
  REQUIRE_FALSE(small_parts[2].is_contiguous());

  SECTION("direct link") {
    TransportPair p = connect_pair("tcp", {}, {});
    const uint64_t before = p.b->direct_frames();
    check_parts(send_and_receive(p, call, small_parts), call, small_parts);
    CHECK(p.b->direct_frames() > before);
    CHECK(p.b->striped_frames() == 0);
  }
  SECTION("stripes") {
    TransportPair p = connect_pair("tcp", {}, {});
    const Tensor big = Tensor::arange(700 * 600).reshape({700, 600});  // 1.6 MB: striped
    const std::vector<Tensor> parts = {big.transpose(0, 1), small_parts[0], big};
    check_parts(send_and_receive(p, call, parts), call, parts);
    CHECK(p.b->striped_frames() == 1);
  }
  SECTION("ZeroMQ") {
    TransportOptions zmq_only;
    zmq_only.direct_max = 0;
    zmq_only.stripes = 0;
    TransportPair p = connect_pair("tcp", zmq_only, zmq_only);
    const Tensor big = Tensor::arange(100 * 60).reshape({100, 60});  // above the 4 KiB ZeroMQ copies
    const std::vector<Tensor> parts = {big.transpose(0, 1), small_parts[0], big, small_parts[2]};
    check_parts(send_and_receive(p, call, parts), call, parts);
    CHECK(p.b->direct_frames() == 0);
    CHECK(p.b->striped_frames() == 0);
  }
}

// The same on a GPU: each link stages a device tensor where it writes it (the stripes' threads
// wait for each piece of the copy; the direct link and ZeroMQ wait for the whole copy first). A
// small frame with a device tensor takes the stripes where there are any, so the sender never
// waits for the device; the direct link takes it only without stripes.
TEST_CASE("actor frames: device tensors arrive as their values by each link", "[net][transport][cuda]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  const Device gpu = Device::cuda(0);
  const std::vector<uint8_t> call = {1, 2, 3};
  const Tensor small = Tensor::arange(12).reshape({3, 4});
  const Tensor big = Tensor::arange(700 * 600).reshape({700, 600});
  SECTION("small, by the stripes") {
    TransportPair p = connect_pair("tcp", {}, {});
    const std::vector<Tensor> parts = {small.to(gpu), small.to(gpu).transpose(0, 1), small};
    const uint64_t before = p.b->direct_frames();
    check_parts(send_and_receive(p, call, parts), call, parts);
    CHECK(p.b->striped_frames() == 1);
    CHECK(p.b->direct_frames() == before);
  }
  SECTION("direct link") {
    TransportOptions no_stripes;
    no_stripes.stripes = 0;
    TransportPair p = connect_pair("tcp", no_stripes, no_stripes);
    const std::vector<Tensor> parts = {small.to(gpu), small.to(gpu).transpose(0, 1), small};
    const uint64_t before = p.b->direct_frames();
    check_parts(send_and_receive(p, call, parts), call, parts);
    CHECK(p.b->direct_frames() > before);
    CHECK(p.b->striped_frames() == 0);
  }
  SECTION("stripes") {
    TransportPair p = connect_pair("tcp", {}, {});
    const std::vector<Tensor> parts = {big.to(gpu), big.to(gpu).transpose(0, 1), small};
    check_parts(send_and_receive(p, call, parts), call, parts);
    CHECK(p.b->striped_frames() == 1);
  }
  SECTION("ZeroMQ") {
    TransportOptions zmq_only;
    zmq_only.direct_max = 0;
    zmq_only.stripes = 0;
    TransportPair p = connect_pair("tcp", zmq_only, zmq_only);
    const std::vector<Tensor> parts = {big.to(gpu), small.to(gpu), small};
    check_parts(send_and_receive(p, call, parts), call, parts);
    CHECK(p.b->direct_frames() == 0);
  }
}

}  // namespace troupe::net
