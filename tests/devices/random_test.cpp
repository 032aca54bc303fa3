// devices/random.h: the thread's generator and local ones, rand_uniform and rand_normal.
#include <catch2/catch.hpp>

#include <cmath>

#include "devices/random.h"

using namespace troupe;

TEST_CASE("random: a local Generator repeats its seed's stream and leaves the thread's alone") {
  manual_seed(5);
  const auto expected = rand_uniform({6}, -1, 1).to_vector<float>();
  manual_seed(5);
  Generator a(9), b(9);
  const auto from_a = rand_normal({32}, 0, 1, DType::f32, a).to_vector<float>();
  CHECK(rand_normal({32}, 0, 1, DType::f32, b).to_vector<float>() == from_a);
  CHECK(rand_uniform({6}, -1, 1).to_vector<float>() == expected);
  manual_seed(5);
  CHECK(rand_uniform({6}, -1, 1, DType::f32, thread_generator()).to_vector<float>() == expected);
}

TEST_CASE("random: rand_normal has the asked mean and spread, bad arguments are errors") {
  Generator g(1);
  const auto v = rand_normal({20000}, 3.0, 0.5, DType::f64, g).to_vector<double>();
  double mean = 0, var = 0;
  for (double x : v) mean += x / static_cast<double>(v.size());
  for (double x : v) var += (x - mean) * (x - mean) / static_cast<double>(v.size());
  CHECK(mean == Approx(3.0).margin(0.02));
  CHECK(std::sqrt(var) == Approx(0.5).margin(0.02));
  CHECK_THROWS_AS(rand_normal({2}, 0, -1), ValueError);
  CHECK_THROWS_AS(rand_normal({2}, 0, 1, DType::i64), DTypeError);
  CHECK_THROWS_AS(rand_uniform({2}, 1, 0), ValueError);
}
