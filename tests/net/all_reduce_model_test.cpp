// The alpha-beta model behind `all_reduce_bench --model` (examples/all_reduce_model.h).
#include <catch2/catch.hpp>
#include <cmath>

#include "examples/all_reduce_model.h"

using namespace troupe;

TEST_CASE("all_reduce model: ring, tree, two levels, crossover and fit", "[net][model]") {
  const AlphaBeta net{50e-6, 1e-9}, host{5e-6, 0.1e-9};  // 50 us and 1 GB/s; 5 us and 10 GB/s
  CHECK(ring_seconds(net, 4, 1e6) == Approx(6 * 50e-6 + 1.5 * 1e6 * 1e-9));
  CHECK(tree_seconds(net, 4, 1e6) == Approx(2 * (50e-6 + 1e6 * 1e-9)));
  CHECK(tree_seconds(net, 5, 0) == Approx(3 * 50e-6));  // ceil(log2 5) rounds
  CHECK(ring_seconds(net, 1, 1e6) == 0);
  CHECK(two_level_seconds(net, host, 2, 4, 1e6) == Approx(2 * ring_seconds(host, 4, 1e6) + ring_seconds(net, 2, 1e6)));

  // At the crossover the two cost the same; below it the tree wins, above it the ring.
  for (int p : {4, 8, 64, 1024}) {
    const double m = ring_tree_crossover_bytes(net, p);
    INFO("p = " << p);
    CHECK(ring_seconds(net, p, m) == Approx(tree_seconds(net, p, m)));
    CHECK(tree_seconds(net, p, m / 2) < ring_seconds(net, p, m / 2));
    CHECK(ring_seconds(net, p, m * 2) < tree_seconds(net, p, m * 2));
  }
  CHECK(std::isinf(ring_tree_crossover_bytes(net, 2)));

  // fit() recovers alpha and beta from times the model itself gives.
  for (int p : {2, 4}) {
    const double large = 64e6;
    const AlphaBeta got = fit(p, tree_seconds(net, p, 0), large, ring_seconds(net, p, large));
    CHECK(got.alpha == Approx(net.alpha));
    CHECK(got.beta == Approx(net.beta));
  }
}
