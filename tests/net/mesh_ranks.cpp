// The ranks of mesh_test.cpp: each hidden test case is one rank, started N times by run_ranks
// (tests/support/ranks.h). Rank 0 drives; the others serve().
//   troupe launch --nproc 4 -- build/bin/test_net "mesh rank: basic"
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "devices/backend.h"
#include "devices/ops.h"
#include "net/remote/mesh.h"
#include "support/close.h"
#include "support/thrown.h"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

// A member that knows its point: its answers are functions of its index, so every value a test
// gets back names the member that made it.
class Cell {
 public:
  Cell(const MeshPoint& at, int64_t scale) : at_(at), scale_(scale) {}
  std::vector<int64_t> coords() const { return at_.coords; }
  int64_t where() const { return actors_rank(); }
  Tensor scaled(const Tensor& x) const { return mul(x, static_cast<double>(scale_ * (at_.index + 1))); }
  int64_t plus_index(int64_t x) const { return x + at_.index; }
  // 0, 1, .. n-1 times (index + 1): answers of any size from a small call.
  Tensor ramp(int64_t n) const { return mul(Tensor::arange(n, DType::f32), static_cast<double>(at_.index + 1)); }
  // The same, but member `odd` throws (fail) or answers one element more.
  Tensor ramp_except(int64_t n, int64_t odd, bool fail) const {
    if (at_.index != odd) return ramp(n);
    if (fail) throw ShapeError("cell " + at_.str() + " fails");
    return ramp(n + 1);
  }
  int64_t add(int64_t x) { return total_ += x; }
  int64_t total() const { return total_; }
  int64_t fail() const { throw ShapeError("cell " + at_.str() + " fails"); }
  // The member on `rank` kills its process; the others answer their index.
  int64_t index_unless_on(int64_t rank) const {
    if (actors_rank() == rank) ::kill(::getpid(), SIGKILL);
    return at_.index;
  }
  // A mesh spawned and called from inside an actor: the sum of its members' ranks.
  int64_t nested(std::vector<int> ranks) const {
    Mesh inner = spawn_mesh("test.cell", ranks, int64_t{1});
    int64_t sum = 0;
    for (auto& f : inner.call<int64_t>("where")) sum += f.get();
    inner.stop();
    return sum;
  }

 private:
  MeshPoint at_;
  int64_t scale_ = 1;
  int64_t total_ = 0;

 public:
  TROUPE_STATE(total_)
};
TROUPE_ACTOR(Cell(const MeshPoint&, int64_t), "test.cell", &Cell::coords, &Cell::where, &Cell::scaled,
             &Cell::plus_index, &Cell::ramp, &Cell::ramp_except, &Cell::add, &Cell::total, &Cell::fail,
             &Cell::index_unless_on, &Cell::nested);

template <class T>
std::vector<T> all(std::vector<Future<T>> futures) {
  return wait_all(futures);
}

// Spawn, coordinates, calls, gather, reduce, slices, at, scatter, send, errors, placement, a mesh
// of 8 on 4 ranks and one spawned inside an actor: on 4 ranks.
void basic() {
  Mesh m = spawn_mesh("test.cell", {{"host", 2}, {"gpu", 2}}, int64_t{3});
  CHECK(m.name() == "test.cell.mesh0");
  REQUIRE(m.size() == 4);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t g = 0; g < 2; ++g) {
      RemoteActor a = m.at({h, g});
      CHECK(a.rank() == h * 2 + g);
      CHECK(a.name() == "test.cell.mesh0[" + std::to_string(h) + "," + std::to_string(g) + "]");
    }
  CHECK((all(m.call<std::vector<int64_t>>("coords")) ==
         std::vector<std::vector<int64_t>>{{0, 0}, {0, 1}, {1, 0}, {1, 1}}));
  CHECK((all(m.call<int64_t>("where")) == std::vector<int64_t>{0, 1, 2, 3}));
  CHECK(m.points()[2].str() == "[host=1,gpu=0]");
  CHECK(m.points()[3]["gpu"] == 1);

  const Tensor x = Tensor::arange(6, DType::f32).reshape({2, 3});
  std::vector<Tensor> ys = all(m.call<Tensor>("scaled", x));
  for (int i = 0; i < 4; ++i) check_close(ys[i], mul(x, 3.0 * (i + 1)));
  Tensor gathered = wait(m.call_gather("scaled", x));
  CHECK(gathered.shape() == Shape{2, 2, 2, 3});
  std::vector<Tensor> want;
  for (int i = 0; i < 4; ++i) want.push_back(mul(x, 3.0 * (i + 1)));
  check_close(gathered, stack(want).reshape({2, 2, 2, 3}));
  check_close(wait(m.call_reduce(ReduceOp::sum, "scaled", x)), mul(x, 30.0));
  check_close(wait(m.call_reduce(ReduceOp::max, "scaled", x)), mul(x, 12.0));
  check_close(wait(m.call_reduce(ReduceOp::avg, "scaled", x)), mul(x, 7.5));
  const Tensor big = Tensor::full({1 << 20}, 1.0);  // 4 MB: zero-copy parts down and up the tree
  check_close(wait(m.call_reduce(ReduceOp::sum, "scaled", big)), Tensor::full({1 << 20}, 30.0));

  Mesh host1 = m.slice({{"host", 1}});
  REQUIRE(host1.size() == 2);
  CHECK(host1.shape().size() == 1);
  CHECK(host1.shape()[0].name == "gpu");
  CHECK((all(host1.call<int64_t>("where")) == std::vector<int64_t>{2, 3}));
  CHECK(host1.at({1}).rank() == 3);
  Mesh gpu0 = m.slice({{"gpu", 0}});
  CHECK((all(gpu0.call<int64_t>("where")) == std::vector<int64_t>{0, 2}));
  check_close(wait(gpu0.call_reduce(ReduceOp::sum, "scaled", x)), mul(x, 12.0));  // indices 0 and 2
  CHECK(m.slice({{"host", 0}, {"gpu", 1}}).size() == 1);

  CHECK((all(m.scatter<int64_t>("plus_index", std::vector<int64_t>{10, 20, 30, 40})) ==
         std::vector<int64_t>{10, 21, 32, 43}));
  CHECK((all(host1.scatter<int64_t>("plus_index", std::vector<int64_t>{7, 8})) == std::vector<int64_t>{9, 11}));
  m.send("add", 5);
  host1.send("add", 2);
  CHECK((all(m.call<int64_t>("total")) == std::vector<int64_t>{5, 5, 7, 7}));

  // Errors: a member's, typed and naming it; bad views.
  std::vector<Future<int64_t>> failing = m.call<int64_t>("fail");
  for (int i = 0; i < 4; ++i) {
    auto message = thrown<ShapeError>([&] { failing[i].get(); });
    CHECK_THAT(message, Catch::Contains("test.cell.mesh0[") && Catch::Contains("fails"));
  }
  thrown<ShapeError>([&] { wait(m.call_gather("fail")); });
  CHECK_THAT(thrown<IndexError>([&] { m.at({2, 0}); }), Catch::Contains("host=2 outside [0, 2)"));
  CHECK_THAT(thrown<ValueError>([&] { m.slice({{"rack", 0}}); }), Catch::Contains("no dim 'rack'"));
  CHECK_THAT(thrown<ValueError>([&] { m.scatter("plus_index", std::vector<int64_t>{1}); }),
             Catch::Contains("1 arguments for 4 members"));
  CHECK_THAT(thrown<ValueError>([&] { spawn_mesh("test.cell", {{"host", 0}}, int64_t{1}); }),
             Catch::Contains("dim 'host' has size 0"));

  // Placement: no rank here has a GPU; CPU placement spreads by what was placed.
  auto missing = thrown<DeviceError>([&] { spawn_on(any_of(Device::cuda), "test.cell", MeshPoint{}, int64_t{1}); });
  CHECK_THAT(missing, Catch::Contains("no rank has a cuda device") && Catch::Contains("rank 3: cpu only"));
  thrown<DeviceError>([&] { spawn_mesh("test.cell", per_device(Device::cuda), int64_t{1}); });
  RemoteActor a = spawn_on(any_of(DeviceType::cpu), "test.cell", MeshPoint{}, int64_t{1});
  RemoteActor b = spawn_on(any_of(DeviceType::cpu), "test.cell", MeshPoint{}, int64_t{1});
  CHECK(a.rank() != b.rank());
  Mesh per_rank = spawn_mesh("test.cell", per_device(DeviceType::cpu), int64_t{1});
  CHECK((all(per_rank.call<int64_t>("where")) == std::vector<int64_t>{0, 1, 2, 3}));

  // 8 members on 4 ranks: a host's two on one rank, answered in one message per rank.
  Mesh eight = spawn_mesh("test.cell", {{"host", 4}, {"gpu", 2}}, int64_t{1});
  CHECK((all(eight.call<int64_t>("where")) == std::vector<int64_t>{0, 0, 1, 1, 2, 2, 3, 3}));
  check_close(wait(eight.call_reduce(ReduceOp::sum, "scaled", x)), mul(x, 36.0));

  // A mesh spawned and called by a member, on ranks 2 and 3.
  CHECK(m.at({0, 1}).request<int64_t>("nested", std::vector<int>{2, 3}).get() == 5);

  // Streamed arguments: chunks of 1,000 bytes down a chain of the ranks, 10,004 bytes not a
  // multiple of them; from a caller that hosts none of the members, and from one that hosts one.
  MeshOptions chunked;
  chunked.name = "chunked";
  chunked.ranks = {1, 2, 3};
  chunked.chunk_bytes = 1000;
  Mesh streamed = spawn_mesh(chunked, "test.cell", {{"member", 3}}, int64_t{1});
  const Tensor odd = Tensor::arange(2501, DType::f32);
  std::vector<Tensor> got = all(streamed.call<Tensor>("scaled", odd));
  for (int i = 0; i < 3; ++i) check_close(got[i], mul(odd, i + 1.0));
  check_close(wait(streamed.call_reduce(ReduceOp::sum, "scaled", odd)), mul(odd, 6.0));
  check_close(wait(streamed.call_gather("scaled", odd)), stack({odd, mul(odd, 2.0), mul(odd, 3.0)}));
  const Tensor rows = Tensor::arange(3 * 667, DType::f32).reshape({3, 667});  // 8,004 bytes, 2-D
  got = all(streamed.call<Tensor>("scaled", rows));
  for (int i = 0; i < 3; ++i) check_close(got[i], mul(rows, i + 1.0));
  chunked.name = "chunked_here";
  chunked.ranks = {0, 1, 2, 3};
  Mesh here = spawn_mesh(chunked, "test.cell", {{"member", 4}}, int64_t{1});
  check_close(wait(here.call_reduce(ReduceOp::sum, "scaled", odd)), mul(odd, 10.0));
  here.send("add", 1);
  CHECK((all(here.call<int64_t>("total")) == std::vector<int64_t>{1, 1, 1, 1}));

  // call_reduce of answers of two chunks or more (2,501 floats, chunks of 1,000 bytes, the last
  // short): the first two of a method come up the tree whole, the next two up the chain of ranks
  // in chunks (ReduceWays times each way twice), then the faster way; from a caller that hosts none
  // of the members (the chain's head is rank 1) and from one that hosts one (its own relay is the
  // head). Up the chain (failed calls are not timed), a member's error and a longer answer fail the call.
  const Tensor ramp = Tensor::arange(2501, DType::f32);
  for (Mesh* mesh : {&streamed, &here}) {
    const double n = static_cast<double>(mesh->size()), sum = n * (n + 1) / 2;
    for (int call = 0; call < 2; ++call) check_close(wait(mesh->call_reduce(ReduceOp::sum, "ramp", int64_t{2501})), mul(ramp, sum));
    check_close(wait(mesh->call_reduce(ReduceOp::max, "ramp", int64_t{2501})), mul(ramp, n));
    check_close(wait(mesh->call_reduce(ReduceOp::avg, "ramp", int64_t{2501})), mul(ramp, sum / n));
    for (int call = 0; call < 2; ++call)
      check_close(wait(mesh->call_reduce(ReduceOp::sum, "ramp_except", int64_t{2501}, int64_t{-1}, false)), mul(ramp, sum));
    for (int64_t odd = 0; odd < static_cast<int64_t>(mesh->size()); ++odd) {
      INFO("member " << odd);
      CHECK_THAT(thrown<ShapeError>([&] { wait(mesh->call_reduce(ReduceOp::sum, "ramp_except", int64_t{2501}, odd, true)); }),
                 Catch::Contains("fails"));
      CHECK_THAT(thrown<ShapeError>([&] { wait(mesh->call_reduce(ReduceOp::sum, "ramp_except", int64_t{2501}, odd, false)); }),
                 Catch::Contains("one shape and dtype"));
    }
    check_close(wait(mesh->call_reduce(ReduceOp::sum, "ramp", int64_t{2501})), mul(ramp, sum));  // still right
  }

  for (Mesh* mesh : {&m, &per_rank, &eight, &streamed, &here}) mesh->stop();
  a.stop();
  b.stop();
}

// Rank 3 dies (kill -9) while it owes answers: exactly its members' futures fail, naming them; a
// mesh with restarts brings its member back on rank 0 with the snapshot's state.
void kill_rank() {
  MeshOptions plain_options;
  plain_options.name = "plain";
  Mesh plain = spawn_mesh(plain_options, "test.cell", {{"host", 2}, {"gpu", 2}}, int64_t{1});
  MeshOptions kept_options;
  kept_options.name = "kept";
  kept_options.max_restarts = 1;
  Mesh kept = spawn_mesh(kept_options, "test.cell", {{"host", 2}, {"gpu", 2}}, int64_t{1});
  CHECK((all(kept.call<int64_t>("add", 5)) == std::vector<int64_t>{5, 5, 5, 5}));
  kept.snapshot();
  std::atomic<int> downs{0};
  std::string down_point;
  plain.on_down([&](const MeshPoint& p, std::exception_ptr why) {
    if (!why) return;
    down_point = p.str();
    ++downs;
  });

  const auto start = std::chrono::steady_clock::now();
  std::vector<Future<int64_t>> answers = plain.call<int64_t>("index_unless_on", 3);
  for (int i = 0; i < 3; ++i) CHECK(answers[i].get() == i);
  auto lost = thrown<PeerLostError>([&] { answers[3].get(); });
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 5.0);
  CHECK_THAT(lost, Catch::Contains("mesh 'plain': member [host=1,gpu=1] ('plain[1,1]') on rank 3"));
  for (int i = 0; i < 100 && downs == 0; ++i) std::this_thread::sleep_for(20ms);
  CHECK(downs == 1);
  CHECK(down_point == "[host=1,gpu=1]");
  std::this_thread::sleep_for(100ms);  // the other mesh's relay hears of the loss too

  // The plain mesh goes on without its lost member.
  std::vector<Future<int64_t>> after = plain.call<int64_t>("where");
  CHECK(after[0].get() == 0);
  CHECK(after[2].get() == 2);
  CHECK_THAT(thrown<PeerLostError>([&] { after[3].get(); }), Catch::Contains("[host=1,gpu=1]"));

  // The kept mesh's member is back on rank 0 ((3 + 1) % 4) with its state.
  CHECK((all(kept.call<int64_t>("total")) == std::vector<int64_t>{5, 5, 5, 5}));
  CHECK(kept.at({1, 1}).rank() == 0);
  CHECK((all(kept.call<int64_t>("where")) == std::vector<int64_t>{0, 1, 2, 0}));
  CHECK((all(kept.call<int64_t>("add", 1)) == std::vector<int64_t>{6, 6, 6, 6}));
  check_close(wait(kept.call_reduce(ReduceOp::sum, "scaled", Tensor::ones({3}))), Tensor::full({3}, 10.0));
}

// On a GPU host, 2 ranks: per_device puts a member on each GPU each rank sees (the members' calls
// queue on their lanes there); any_of(cuda) spreads single actors by what was placed.
void on_cuda() {
  const int64_t gpus = backend(DeviceType::cuda).device_count();
  Mesh m = spawn_mesh("test.cell", per_device(Device::cuda), int64_t{2});
  REQUIRE(m.size() == static_cast<size_t>(2 * gpus));
  CHECK(m.shape()[0].name == "device");
  const std::vector<int64_t> where = all(m.call<int64_t>("where"));
  for (size_t i = 0; i < where.size(); ++i) CHECK(where[i] == static_cast<int64_t>(i) / gpus);
  CHECK(m.at({0}).rank() == 0);
  const std::vector<int64_t> indices = all(m.call<int64_t>("plus_index", int64_t{0}));
  for (size_t i = 0; i < indices.size(); ++i) CHECK(indices[i] == static_cast<int64_t>(i));
  RemoteActor a = spawn_on(any_of(Device::cuda), "test.cell", MeshPoint{}, int64_t{1});
  RemoteActor b = spawn_on(any_of(Device::cuda), "test.cell", MeshPoint{}, int64_t{1});
  if (gpus == 1) CHECK(a.rank() != b.rank());  // each GPU had one member; a took one, b the other
  m.stop();
  a.stop();
  b.stop();
}

template <class Drive>
void mesh_rank(Drive&& drive) {
  InitOptions o;
  o.timeout = 30s;
  auto world = init_process_group(o);
  RemoteActors actors(world);
  if (world->rank() == 0) drive();
  else CHECK_NOTHROW(serve());
}

}  // namespace

TEST_CASE("mesh rank: basic", "[.rank]") { mesh_rank(basic); }
TEST_CASE("mesh rank: kill", "[.rank]") { mesh_rank(kill_rank); }
TEST_CASE("mesh rank: cuda", "[.rank]") { mesh_rank(on_cuda); }
