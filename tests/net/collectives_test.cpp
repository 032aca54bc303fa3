// Collectives: argument checks and one-rank semantics in this process; every collective, dtype,
// async variant and sub-group with 2, 3 and 4 real processes (collectives_ranks.cpp), over ZeroMQ and
// with all_reduce through shared memory; a rank killed mid-collective; mismatched calls; per-call
// timeouts.
#include <sched.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <limits>

#include "net/collectives.h"
#include "net/collectives/all_reduce.h"
#include "net/collectives/group_state.h"
#include "net/collectives/reduce_kernels.h"
#include "net/bootstrap/launcher.h"
#include "support/ranks.h"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

// Ranks of a collectives_ranks.cpp test case; shared_memory false: every collective goes over
// ZeroMQ even between ranks on this host.
RankRun run_collective_ranks(int nproc, const std::string& rank_test, bool stop_on_failure = true,
                             bool shared_memory = true, bool small = false) {
  LaunchOptions o;
  if (!shared_memory) o.env.emplace_back("TROUPE_SHM", "0");
  if (small) o.env.emplace_back("TROUPE_TEST_SMALL", "1");
  o.stop_on_failure = stop_on_failure;
  return run_ranks(nproc, rank_test, o);
}

}  // namespace

TEST_CASE("collectives: every collective, dtype and async variant on 2, 3 and 4 ranks over ZeroMQ", "[net][collectives]") {
  for (int n : {2, 3, 4}) {
    RankRun run = run_collective_ranks(n, "collectives rank: all", true, false);
    check_all_passed(run, n);
  }
}

TEST_CASE("collectives: the same with all_reduce through shared memory, 2 and 3 ranks", "[net][collectives]") {
  for (int n : {2, 3}) {
    RankRun run = run_collective_ranks(n, "collectives rank: all");
    check_all_passed(run, n);
  }
}

// Two ranks bound to one CPU (as a job engine's binding or an inherited taskset may leave them):
// their masks give them fewer CPUs than ranks, so the shared-memory all_reduce waits by yielding,
// never by pausing on the CPU the peer needs; the answers are the same.
TEST_CASE("collectives: all_reduce through shared memory with 2 ranks bound to one CPU", "[net][collectives]") {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &set)) ++cpu;
  LaunchOptions o;
  o.command = {"taskset", "-c", std::to_string(cpu)};
  RankRun run = run_ranks(2, "collectives rank: all", o);
  check_all_passed(run, 2);
}

TEST_CASE("collectives: kill -9 of a rank mid-collective gives every survivor PeerLostError", "[net][collectives]") {
  for (bool shared_memory : {true, false})
    for (bool small : {false, true}) {
      // Small ones on 2 ranks: rank 0's receives from any rank then fail too (none is left).
      const int n = small ? 2 : 3;
      RankRun run = run_collective_ranks(n, "collectives rank: kill", false, shared_memory, small);
      INFO(run.digest());
      REQUIRE(run.result.ranks.size() == static_cast<size_t>(n));
      CHECK(run.result.ranks[1].signal == 9);
      CHECK(run.result.ranks[0].exit_code == 0);
      if (n == 3) CHECK(run.result.ranks[2].exit_code == 0);
      CHECK(run.passed_ranks() == n - 1);
    }
}

TEST_CASE("collectives: mismatched calls fail on every rank, naming both calls", "[net][collectives]") {
  for (bool shared_memory : {true, false})
    for (int n : {2, 3}) {
      RankRun run = run_collective_ranks(n, "collectives rank: mismatch", true, shared_memory);
      check_all_passed(run, n);
    }
}

TEST_CASE("collectives: a per-call timeout fails the caller and aborts the call for the others", "[net][collectives]") {
  RankRun run = run_collective_ranks(2, "collectives rank: timeout");
  check_all_passed(run, 2);
}

TEST_CASE("collectives: one rank, and bad arguments are typed errors", "[net][collectives]") {
  auto world = world_of_one();
  ProcessGroup& g = *world;

  Tensor t = Tensor::from_vector<float>({1, 2, 3}, {3});
  all_reduce(g, t, ReduceOp::avg);
  CHECK(t.to_vector<float>() == std::vector<float>({1, 2, 3}));
  broadcast(g, t, 0);
  reduce(g, t, 0, ReduceOp::product);
  CHECK(t.to_vector<float>() == std::vector<float>({1, 2, 3}));
  std::vector<Tensor> parts;
  all_gather(g, parts, t);
  REQUIRE(parts.size() == 1);
  CHECK(parts[0].to_vector<float>() == std::vector<float>({1, 2, 3}));
  Tensor out = Tensor::zeros({3});
  scatter(g, out, {t}, 0);
  CHECK(out.to_vector<float>() == std::vector<float>({1, 2, 3}));
  std::vector<Tensor> got;
  all_to_all(g, got, {t});
  REQUIRE(got.size() == 1);
  reduce_scatter(g, out, {t}, ReduceOp::max);
  CHECK(out.to_vector<float>() == std::vector<float>({1, 2, 3}));
  barrier(g);
  all_reduce_async(g, t).wait();
  barrier_async(g).wait();

  // Root out of range, lists of the wrong length, undefined tensors.
  CHECK_THROWS_AS(broadcast(g, t, 1), IndexError);
  CHECK_THROWS_WITH(broadcast(g, t, 1), Catch::Contains("broadcast: rank 0: root 1 outside a group of 1"));
  CHECK_THROWS_AS(reduce(g, t, -1), IndexError);
  CHECK_THROWS_AS(gather(g, parts, t, 3), IndexError);
  CHECK_THROWS_AS(scatter(g, out, {t, t}, 0), ValueError);
  CHECK_THROWS_WITH(scatter(g, out, {t, t}, 0), Catch::Contains("scatter: rank 0: 2 inputs for a group of 1"));
  CHECK_THROWS_AS(reduce_scatter(g, out, {}, ReduceOp::sum), ValueError);
  CHECK_THROWS_AS(all_to_all(g, got, {t, t}), ValueError);
  std::vector<Tensor> three(3);
  CHECK_THROWS_WITH(all_gather(g, three, t), Catch::Contains("all_gather: rank 0: 3 outputs for a group of 1"));
  Tensor undefined;
  CHECK_THROWS_AS(all_reduce(g, undefined), ValueError);
  CHECK_THROWS_WITH(all_reduce(g, undefined), Catch::Contains("all_reduce: rank 0: tensor is undefined"));
  CHECK_THROWS_AS(all_gather(g, parts, undefined), ValueError);
  CHECK_THROWS_AS(scatter(g, undefined, {t}, 0), ValueError);
  CHECK_THROWS_AS(all_to_all(g, got, {undefined}), ValueError);

  // Parts that disagree with the output, or with each other.
  Tensor four = Tensor::zeros({4});
  CHECK_THROWS_AS(scatter(g, four, {t}, 0), ShapeError);
  CHECK_THROWS_WITH(scatter(g, four, {t}, 0), Catch::Contains("inputs[0] is f32[3], expected f32[4]"));
  Tensor ints = Tensor::zeros({3}, DType::i32);
  CHECK_THROWS_AS(scatter(g, ints, {t}, 0), DTypeError);

  // Reductions the dtype does not support.
  Tensor i = Tensor::zeros({2}, DType::i32);
  CHECK_THROWS_AS(all_reduce(g, i, ReduceOp::avg), DTypeError);
  CHECK_THROWS_WITH(all_reduce(g, i, ReduceOp::avg),
                    Catch::Contains("all_reduce: rank 0: cannot reduce i32[2] with avg (avg needs a floating dtype)"));
  Tensor b = Tensor::zeros({2}, DType::boolean);
  CHECK_THROWS_AS(all_reduce(g, b, ReduceOp::sum), DTypeError);
  CHECK_THROWS_AS(reduce_scatter(g, out, {b}, ReduceOp::product), DTypeError);
  CHECK_THROWS_AS(reduce(g, b, 0, ReduceOp::none), ValueError);
  all_reduce(g, b, ReduceOp::max);

  // Async variants check their arguments when called.
  CHECK_THROWS_AS(all_reduce_async(g, i, ReduceOp::avg), DTypeError);
  CHECK_THROWS_AS(broadcast_async(g, t, 2), IndexError);
}

// The cache of a group's all_reduce algorithms, in one process (collectives_ranks.cpp's
// algorithm_cache runs the same on 2, 3 and 4 ranks, over ZeroMQ and shared memory).
TEST_CASE("collectives: one all_reduce object per (group, count, dtype, op), freed with the group", "[net][collectives]") {
  using collectives::AllReduce;
  using collectives::GroupState;
  auto world = world_of_one();
  GroupState& state = GroupState::of(*world);
  CHECK(&GroupState::of(*world) == &state);
  Tensor t = Tensor::from_vector<float>({1, 2, 3}, {3});
  all_reduce(*world, t);
  const std::shared_ptr<AllReduce> first = state.all_reduce(3, DType::f32, ReduceOp::sum);
  all_reduce(*world, t);
  all_reduce_async(*world, t).wait();
  CHECK(state.all_reduce(3, DType::f32, ReduceOp::sum) == first);
  CHECK(state.cached_algorithms() == 1);
  CHECK(std::string(first->name()) == "local");
  CHECK(t.to_vector<float>() == std::vector<float>({1, 2, 3}));
  Tensor four = Tensor::zeros({4});
  all_reduce(*world, four);
  CHECK(state.all_reduce(4, DType::f32, ReduceOp::sum) != first);
  CHECK(state.all_reduce(3, DType::f32, ReduceOp::max) != first);
  CHECK(state.all_reduce(3, DType::f64, ReduceOp::sum) != first);
  CHECK(state.cached_algorithms() == 4);

  // The least recently used shapes go once a group has more than kMaxAlgorithms.
  for (int64_t count = 100; count < 100 + static_cast<int64_t>(GroupState::kMaxAlgorithms); ++count)
    state.all_reduce(count, DType::f32, ReduceOp::sum);
  CHECK(state.cached_algorithms() == GroupState::kMaxAlgorithms);
  CHECK(state.all_reduce(3, DType::f32, ReduceOp::sum) != first);  // evicted, made again

  // A group's algorithms go with it (a group that ran only blocking calls: an async call's job may
  // still hold its group for a moment after wait() returns).
  std::shared_ptr<ProcessGroup> sub = world->new_group({0});
  all_reduce(*sub, t);
  CHECK(GroupState::of(*sub).cached_algorithms() == 1);  // made by the call
  std::weak_ptr<AllReduce> cached = GroupState::of(*sub).all_reduce(3, DType::f32, ReduceOp::sum);
  sub.reset();
  CHECK(cached.expired());
}

TEST_CASE("collectives: reduction kernels", "[net][collectives]") {
  using collectives::reduce_buffers;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> a = {1, nan, 3, -4}, b = {2, 5, nan, -8}, out(4);
  reduce_buffers(out.data(), a.data(), b.data(), 4, DType::f32, ReduceOp::max);
  CHECK(out[0] == 2);
  CHECK(std::isnan(out[1]));  // NaN wins, from either side
  CHECK(std::isnan(out[2]));
  CHECK(out[3] == -4);
  reduce_buffers(out.data(), a.data(), b.data(), 4, DType::f32, ReduceOp::min);
  CHECK((out[0] == 1 && std::isnan(out[1]) && std::isnan(out[2]) && out[3] == -8));
  reduce_buffers(a.data(), a.data(), b.data(), 4, DType::f32, ReduceOp::product);  // in place
  CHECK((a[0] == 2 && a[3] == 32));

  std::vector<uint8_t> x = {200, 3}, y = {100, 4};
  reduce_buffers(x.data(), x.data(), y.data(), 2, DType::u8, ReduceOp::sum);
  CHECK(x == std::vector<uint8_t>({44, 7}));  // wraps, like torch
  uint8_t p[3] = {1, 0, 0}, q[3] = {1, 1, 0};
  reduce_buffers(p, p, q, 3, DType::boolean, ReduceOp::min);
  CHECK((p[0] == 1 && p[1] == 0 && p[2] == 0));
  reduce_buffers(p, p, q, 3, DType::boolean, ReduceOp::max);
  CHECK((p[0] == 1 && p[1] == 1 && p[2] == 0));

  // f16 and bf16 reduce in f32 and round once: 2048 + 1 is 2049 in f32, 2048 in f16.
  std::vector<Half> h = {Half(2048.0f), Half(0.5f)}, k = {Half(1.0f), Half(0.25f)};
  reduce_buffers(h.data(), h.data(), k.data(), 2, DType::f16, ReduceOp::sum);
  CHECK((static_cast<float>(h[0]) == 2048.0f && static_cast<float>(h[1]) == 0.75f));
  std::vector<BFloat16> bf = {BFloat16(3.0f)};
  collectives::divide_buffer(bf.data(), 1, DType::bf16, 2);
  CHECK(static_cast<float>(bf[0]) == 1.5f);

  CHECK(collectives::reduction_supports(DType::boolean, ReduceOp::max));
  CHECK_FALSE(collectives::reduction_supports(DType::boolean, ReduceOp::sum));
  CHECK_FALSE(collectives::reduction_supports(DType::i64, ReduceOp::avg));
  CHECK(collectives::reduction_supports(DType::bf16, ReduceOp::avg));
}
