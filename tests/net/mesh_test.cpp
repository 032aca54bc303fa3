// Actor meshes (net/remote/mesh.h): the tree and the placement choice here, the meshes themselves
// between real processes on loopback (the ranks: mesh_ranks.cpp).
#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <vector>

#include "devices/backend.h"
#include "net/remote/mesh_placement.h"
#include "net/remote/mesh_state.h"
#include "net/remote/mesh_tree.h"
#include "support/ranks.h"
#include "support/skip.h"
#include "support/thrown.h"

using namespace troupe;
using namespace troupe::net;

TEST_CASE("mesh: the call tree reaches every rank once, in log2 hops (binomial) or log8 hops (small calls)", "[net][mesh]") {
  using Ranges = std::vector<std::pair<size_t, size_t>>;
  CHECK(net::detail::tree_children(1).empty());
  CHECK((net::detail::tree_children(8) == Ranges{{4, 8}, {2, 4}, {1, 2}}));
  CHECK((net::detail::tree_children(5) == Ranges{{3, 5}, {2, 3}, {1, 2}}));
  for (size_t n = 1; n <= 64; ++n) {
    std::vector<int> reached(n, 0);
    size_t deepest = 0;
    std::function<void(size_t, size_t, size_t)> walk = [&](size_t begin, size_t end, size_t depth) {
      ++reached[begin];
      deepest = std::max(deepest, depth);
      for (auto [b, e] : net::detail::tree_children(end - begin)) walk(begin + b, begin + e, depth + 1);
    };
    walk(0, n, 0);
    CHECK(std::count(reached.begin(), reached.end(), 1) == static_cast<long>(n));
    size_t log2 = 0;  // floor(log2(n)): the hops to the farthest rank
    while ((size_t{2} << log2) <= n) ++log2;
    CHECK(deepest == log2);
  }
  // Small calls: 8 children each, so 9 ranks are one hop away and 64 at most two.
  CHECK((net::detail::tree_children(9, 8) ==
         Ranges{{1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}, {6, 7}, {7, 8}, {8, 9}}));
  CHECK((net::detail::tree_children(4, 8) == Ranges{{1, 2}, {2, 3}, {3, 4}}));
  CHECK((net::detail::tree_children(12, 8) ==
         Ranges{{1, 3}, {3, 5}, {5, 7}, {7, 8}, {8, 9}, {9, 10}, {10, 11}, {11, 12}}));
  for (size_t n = 1; n <= 65; ++n) {
    std::vector<int> reached(n, 0);
    size_t deepest = 0;
    std::function<void(size_t, size_t, size_t)> walk = [&](size_t begin, size_t end, size_t depth) {
      ++reached[begin];
      deepest = std::max(deepest, depth);
      for (auto [b, e] : net::detail::tree_children(end - begin, 8)) walk(begin + b, begin + e, depth + 1);
    };
    walk(0, n, 0);
    CHECK(std::count(reached.begin(), reached.end(), 1) == static_cast<long>(n));
    CHECK(deepest == (n == 1 ? 0 : n <= 9 ? 1 : 2));
  }
}

TEST_CASE("mesh: a streamed argument's chunks cover it once, the last one short", "[net][mesh]") {
  using Ranges = std::vector<std::pair<size_t, size_t>>;
  CHECK(net::detail::chunk_ranges(0, 1000).empty());
  CHECK((net::detail::chunk_ranges(2000, 1000) == Ranges{{0, 1000}, {1000, 2000}}));
  CHECK((net::detail::chunk_ranges(10004, 1000).back() == std::pair<size_t, size_t>{10000, 10004}));
  CHECK(net::detail::chunk_ranges(10004, 1000).size() == 11);
  CHECK((net::detail::tree_children(5, net::detail::kChainFanout) == Ranges{{1, 5}}));  // a chain
  CHECK_THAT(thrown<ValueError>([] { net::detail::chunk_ranges(10, 0); }), Catch::Contains("chunks of 0 bytes"));
}

TEST_CASE("mesh: a large reduction goes up a chain when faster, timing each way twice first, the other every 16th call",
          "[net][mesh]") {
  net::detail::ReduceWays ways;
  const size_t chunk = 1000;
  CHECK_FALSE(ways.chain_next(chunk));  // nothing known: whole
  ways.measured(false, 0.9, 2000);      // a first call: first touches
  CHECK_FALSE(ways.chain_next(chunk));  // whole again, timed
  ways.measured(false, 0.5, 1999);
  CHECK_FALSE(ways.chain_next(chunk));  // under two chunks
  ways.measured(false, 0.5, 2000);
  CHECK(ways.chain_next(chunk));        // large: the chain, twice
  CHECK_FALSE(ways.chain_next(0));      // chunks off
  ways.measured(true, 0.8, 2000);
  CHECK(ways.chain_next(chunk));
  ways.measured(true, 0.2, 2000);       // the chain is faster
  int chained = 0;
  for (int call = 0; call < 32; ++call) {
    const bool chain = ways.chain_next(chunk);
    chained += chain;
    ways.measured(chain, chain ? 0.2 : 0.5, 2000);
  }
  CHECK(chained == 30);            // all but every 16th
  ways.measured(true, 0.9, 2000);  // the links got slower than the CPUs
  CHECK_FALSE(ways.chain_next(chunk));
}

TEST_CASE("mesh: placement by devices and by what was placed; an unmeetable request names what is missing",
          "[net][mesh]") {
  net::detail::RankReport cpu0{0, 0, "no CUDA driver", 1000}, cpu1{1, 0, "no CUDA driver", 2000};
  auto message = thrown<DeviceError>([&] {
    net::detail::choose_placement({cpu0, cpu1}, any_of(Device::cuda), {}, "spawn_on: ");
  });
  CHECK(message == "spawn_on: no rank has a cuda device (rank 0: cpu only (no CUDA driver); rank 1: cpu only (no CUDA driver))");
  thrown<DeviceError>([&] { net::detail::choose_placement({cpu0, cpu1}, per_device(Device::cuda), {}, ""); });

  // CPU: the rank with fewer placed, then more free memory.
  auto one = net::detail::choose_placement({cpu0, cpu1}, any_of(DeviceType::cpu), {}, "");
  REQUIRE(one.size() == 1);
  CHECK(one[0].rank == 1);
  one = net::detail::choose_placement({cpu0, cpu1}, any_of(DeviceType::cpu), {{"1/cpu", 1}}, "");
  CHECK(one[0].rank == 0);

  net::detail::RankReport gpu2{2, 2, "", 500};
  auto every = net::detail::choose_placement({cpu0, cpu1, gpu2}, per_device(Device::cuda), {}, "");
  REQUIRE(every.size() == 2);
  CHECK((every[0].rank == 2 && every[0].device == "cuda:0"));
  CHECK((every[1].rank == 2 && every[1].device == "cuda:1"));
  auto least = net::detail::choose_placement({cpu0, cpu1, gpu2}, any_of(Device::cuda), {{"2/cuda:0", 3}}, "");
  CHECK(least[0].device == "cuda:1");
}

TEST_CASE("mesh: a point's coordinates by name", "[net][mesh]") {
  MeshPoint p{{"host", "gpu"}, {1, 3}, 7};
  CHECK(p.str() == "[host=1,gpu=3]");
  CHECK(p["gpu"] == 3);
  CHECK_THAT(thrown<ValueError>([&] { (void)p["rack"]; }), Catch::Contains("no dim 'rack' (the mesh's dims: host, gpu)"));
}

TEST_CASE("mesh: spawn 2x2 on 4 ranks, call, gather, reduce, slice, at, scatter, placement", "[net][mesh]") {
  RankRun run = run_ranks(4, "mesh rank: basic");
  check_all_passed(run, 4);
}

TEST_CASE("mesh: a killed rank fails exactly its members' futures; a restarted member keeps its state",
          "[net][mesh]") {
  troupe::net::LaunchOptions o;
  o.stop_on_failure = false;  // let the survivors finish
  RankRun run = run_ranks(4, "mesh rank: kill", o);
  INFO(run.output);
  REQUIRE(run.result.ranks.size() == 4);
  CHECK(run.result.ranks[3].signal == 9);
  for (int r : {0, 1, 2}) CHECK(run.result.ranks[r].exit_code == 0);
  CHECK(run.passed_ranks() == 3);
}

// The example at a small size, as `troupe launch` runs it: it checks every batch against one
// process and exits 1 when they differ.
TEST_CASE("mesh: mesh_serving's ensemble agrees with one process", "[net][mesh]") {
  troupe::net::LaunchOptions o;
  o.nproc = 2;
  o.command = {std::string(TROUPE_BIN_DIR) + "/mesh_serving", "--models", "4", "--T", "6", "--B", "3", "--C", "32",
               "--reps", "1", "--batches", "2", "--json"};
  const RankRun run = launch_collecting(o);
  INFO(run.output);
  CHECK(run.result.exit_code == 0);
  CHECK_THAT(run.output, Catch::Contains("\"models\":4,\"ranks\":2"));
}

TEST_CASE("mesh: per_device(cuda) puts a member on each GPU of each rank; any_of(cuda) spreads", "[net][mesh][cuda]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  check_all_passed(run_ranks(2, "mesh rank: cuda"), 2);
}
