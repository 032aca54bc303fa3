// The tests' comparison vocabulary (tests/support/close.h) measures what it says.
#include <catch2/catch.hpp>

#include <cmath>

#include "devices/tensor.h"
#include "support/close.h"

using namespace troupe;

TEST_CASE("relative_error is the largest difference over the reference's largest magnitude", "[close]") {
  const Tensor want = Tensor::from_vector<float>({0.5f, -2.0f, 1.0f}, {3});
  CHECK(relative_error(want, want) == 0);
  CHECK(relative_error(Tensor::from_vector<float>({0.5f, -2.0f, 1.2f}, {3}), want) == Approx(0.2 / 2.0));
  // Small outputs are measured against their own scale: a difference as large as the values
  // themselves is an error of 1, not of 0.01 (what a scale floored at 1 reported).
  const Tensor small = Tensor::from_vector<float>({0.01f, -0.005f}, {2});
  const Tensor off = Tensor::from_vector<float>({0.02f, -0.005f}, {2});
  CHECK(relative_error(off, small) == Approx(1.0));
  CHECK(relative_error(off, small) > 1e-2);
  // An all-zero reference admits no difference at all.
  const Tensor zeros = Tensor::zeros({2});
  CHECK(relative_error(zeros, zeros) == 0);
  CHECK(relative_error(Tensor::from_vector<float>({0.0f, 1e-20f}, {2}), zeros) > 1e6);
  CHECK(std::isinf(relative_error(Tensor::from_vector<float>({NAN, 0.0f}, {2}), zeros)));
}
