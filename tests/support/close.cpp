#include "support/close.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

using troupe::Tensor;

void check_close(const Tensor& got, const Tensor& want, const Tolerance& tolerance) {
  REQUIRE(got.defined());
  CHECK(got.meta().str() == want.meta().str());
  if (got.meta() != want.meta()) return;
  const auto g = got.to_vector<double>(), w = want.to_vector<double>();
  std::vector<double> scale;
  if (tolerance.scale.defined()) {
    REQUIRE(tolerance.scale.shape() == want.shape());
    scale = tolerance.scale.to_vector<double>();
  }
  const bool exact = !is_floating(want.dtype());
  size_t bad = 0, first_bad = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const bool same = g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i]));
    const double bound = tolerance.atol + tolerance.rtol * (scale.empty() ? std::abs(w[i]) : scale[i]);
    if (same || (!exact && std::abs(g[i] - w[i]) <= bound)) continue;
    if (bad++ == 0) first_bad = i;
  }
  INFO(bad << " of " << w.size() << " elements differ; first at " << first_bad << ": got "
            << (bad ? g[first_bad] : 0) << ", want " << (bad ? w[first_bad] : 0));
  CHECK(bad == 0);
}

// The scale is want's own largest magnitude: flooring it at 1 (as this did) let an output whose
// values are all small differ by its whole size and still pass.
double relative_error(const Tensor& got, const Tensor& want) {
  REQUIRE(got.shape() == want.shape());
  const auto g = got.to_vector<double>(), w = want.to_vector<double>();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i]) || std::isnan(w[i])) return std::numeric_limits<double>::infinity();
    diff = std::max(diff, std::abs(g[i] - w[i]));
    scale = std::max(scale, std::abs(w[i]));
  }
  if (diff == 0) return 0;
  return diff / std::max(scale, std::numeric_limits<double>::min());
}

double max_abs_diff(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(want[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::abs(double(got[i]) - double(want[i])));
  }
  return worst;
}

void check_values(const Tensor& t, const std::vector<double>& expected, double rel, double abs) {
  const std::vector<double> got = t.to_vector<double>();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << " of " << t.meta().str() << ": got " << got[i] << ", expected " << expected[i]);
    if (std::isnan(expected[i])) {
      CHECK(std::isnan(got[i]));
    } else if (std::isinf(expected[i])) {
      CHECK(got[i] == expected[i]);
    } else {
      CHECK(std::fabs(got[i] - expected[i]) <= rel * std::fabs(expected[i]) + abs);
    }
  }
}
