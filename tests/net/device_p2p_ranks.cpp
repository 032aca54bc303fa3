// The ranks of device_p2p_test.cpp: two processes sharing cuda:0 send each other device tensors.
//   troupe launch --nproc 2 -- build/bin/test_net "net rank: device tensors"
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "devices/backend.h"
#include "devices/ops.h"
#include "devices/sync.h"
#include "net/collectives.h"
#include "net/process_group.h"
#include "net/remote/remote_actor.h"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

// Values that depend on the seed, made on the host and moved to `device`.
Tensor seeded(DType t, const Shape& s, int seed, Device device) {
  std::vector<float> v(static_cast<size_t>(numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((seed * 31 + i * 7) % 251);
  return Tensor::from_vector<float>(v, s).to(t).to(device);
}

// The syncs counted since the last reset, by op and actor: what a failed CHECK(sync_count() == 0) says.
std::string sync_sites_text() {
  std::string text;
  for (const SyncSite& site : sync_sites())
    text += site.op + " in " + site.actor + " on " + site.device.str() + ": " + std::to_string(site.count) + "; ";
  return text;
}

bool same(const Tensor& a, const Tensor& b) {
  return a.to(Device::cpu()).to(DType::f32).to_vector<float>() == b.to(Device::cpu()).to(DType::f32).to_vector<float>();
}

}  // namespace

TEST_CASE("net rank: device tensors", "[.rank]") {
  InitOptions options;
  options.timeout = 60s;
  auto world = init_process_group(options);
  REQUIRE(world->size() == 2);
  const Device gpu = Device::cuda(0);
  const int peer = 1 - world->rank();
  // Sizes below and above the staged path's 1 MiB, an odd byte count, 64 MiB, and other dtypes.
  const std::vector<std::pair<DType, Shape>> cases = {{DType::f32, {64, 16}},   {DType::f32, {768, 1024}},
                                                      {DType::u8, {1048583}},   {DType::bf16, {1024, 1025}},
                                                      {DType::f32, {4096, 4096}}, {DType::i64, {3, 100000}}};
  int seed = 0;
  for (const auto& [dtype, shape] : cases) {
    INFO(name(dtype) << to_string(shape));
    ++seed;
    if (world->rank() == 0) {
      world->send(seeded(dtype, shape, seed, gpu), 1, seed);
      world->send(seeded(dtype, shape, seed + 1000, gpu), 1, seed);
    } else {
      Tensor on_gpu = Tensor::empty(shape, dtype, gpu), on_host = Tensor::empty(shape, dtype);
      reset_sync_counts();
      world->recv(on_gpu, 0, seed);  // lands on the GPU, queued: no host wait
      INFO(sync_sites_text());
      CHECK(sync_count() == 0);
      CHECK(on_gpu.device() == gpu);
      world->recv(on_host, 0, seed);
      CHECK(on_host.device() == Device::cpu());
      CHECK(same(on_gpu, seeded(dtype, shape, seed, Device::cpu())));
      CHECK(same(on_host, seeded(dtype, shape, seed + 1000, Device::cpu())));
    }
  }
  // Ten sends in a row reuse the channel's segments; six sent before any receive is posted overflow
  // them (the rest go through host bytes), and every value still arrives in order. Four small ones
  // (under the staged path's 1 MiB) take the network's stripes, their copies still queued.
  const Shape big{2048, 1024}, small{64, 16};
  for (const auto& [round, shape] : {std::pair{10, big}, std::pair{6, big}, std::pair{4, small}}) {
    if (world->rank() == 0) {
      std::vector<Tensor> values;
      for (int i = 0; i < round; ++i) values.push_back(seeded(DType::f32, shape, 100 * round + i, gpu));
      // Through shared memory or the network's stripes, the sender never waits for the device.
      reset_sync_counts();
      std::vector<Work> sends;
      for (const Tensor& v : values) sends.push_back(world->isend(v, 1, 77));
      INFO(round << " sends of " << to_string(shape) << ": " << sync_sites_text());
      CHECK(sync_count() == 0);
      for (Work& w : sends) w.wait();
    } else {
      if (round == 6) std::this_thread::sleep_for(200ms);  // let all six be staged or sent first
      for (int i = 0; i < round; ++i) {
        Tensor got = Tensor::empty(shape, DType::f32, gpu);
        world->recv(got, 0, 77);
        CHECK(same(got, seeded(DType::f32, shape, 100 * round + i, Device::cpu())));
      }
    }
  }
  // A receive of the wrong shape is refused by name; the next one still gets its tensor.
  if (world->rank() == 0) {
    world->send(seeded(DType::f32, big, 1, gpu), 1, 88);
    world->send(seeded(DType::f32, big, 2, gpu), 1, 88);
  } else {
    Tensor wrong = Tensor::empty({big[0] + 1, big[1]}, DType::f32, gpu);
    CHECK_THROWS_WITH(world->recv(wrong, 0, 88), Catch::Contains("expected f32[2049,1024]"));
    Tensor right = Tensor::empty(big, DType::f32, gpu);
    world->recv(right, 0, 88);
    CHECK(same(right, seeded(DType::f32, big, 2, Device::cpu())));
  }
  // And back: rank 1 to rank 0, a device tensor to a host receive.
  if (world->rank() == 1) {
    world->send(seeded(DType::f32, big, 5, gpu), 0, 99);
  } else {
    Tensor got = Tensor::empty(big, DType::f32);
    world->recv(got, 1, 99);
    CHECK(same(got, seeded(DType::f32, big, 5, Device::cpu())));
  }
  Tensor token = Tensor::zeros({1});
  if (world->rank() == 0) world->recv(token, peer, 1000);
  else world->send(token, peer, 1000);
}

namespace {

struct Doubler {
  Tensor twice(const Tensor& x) { return mul(x, 2.0); }
};

}  // namespace

// Device tensors in collectives and remote calls: staged to host on the caller's stream, the
// values exact on both ranks.
TEST_CASE("net rank: device tensors in collectives and remote calls", "[.rank]") {
  InitOptions options;
  options.timeout = 60s;
  auto world = init_process_group(options);
  REQUIRE(world->size() == 2);
  const Device gpu = Device::cuda(0);
  const int rank = world->rank();
  const Shape shape{1024, 1024};  // 4 MiB: striped on the network
  const Tensor mine = seeded(DType::f32, shape, 10 + rank, gpu);
  const Tensor sum = add(seeded(DType::f32, shape, 10, Device::cpu()), seeded(DType::f32, shape, 11, Device::cpu()));

  Tensor reduced = mine.clone();
  all_reduce(*world, reduced);
  CHECK(reduced.device() == gpu);
  CHECK(same(reduced, sum));

  Tensor reduced_async = mine.clone();
  reset_sync_counts();
  Work w = all_reduce_async(*world, reduced_async);
  CHECK(sync_count() == 0);  // the copy to host is waited for where the collective runs
  w.wait();
  CHECK(same(reduced_async, sum));

  Tensor root_value = rank == 0 ? mine.clone() : Tensor::empty(shape, DType::f32, gpu);
  broadcast(*world, root_value, 0);
  CHECK(same(root_value, seeded(DType::f32, shape, 10, Device::cpu())));

  std::vector<Tensor> gathered;
  all_gather(*world, gathered, mine);
  REQUIRE(gathered.size() == 2);
  CHECK(same(gathered[1 - rank], seeded(DType::f32, shape, 11 - rank, Device::cpu())));

  RemoteActors actors(world);
  if (rank == 1) {
    host("device.doubler", std::make_shared<Doubler>(), Method{"twice", &Doubler::twice});
    CHECK_NOTHROW(serve());
    return;
  }
  RemoteActor doubler = lookup("device.doubler", 10s);
  for (const Shape& s : {Shape{16}, shape}) {
    const Tensor x = seeded(DType::f32, s, 3, gpu);
    reset_sync_counts();
    auto answer = doubler.request<Tensor>("twice", x);
    CHECK(sync_count() == 0);  // the argument's copy to host is waited for by the stripes, small or not
    const Tensor y = answer.get();
    CHECK(same(y, mul(seeded(DType::f32, s, 3, Device::cpu()), 2.0)));
  }
}
