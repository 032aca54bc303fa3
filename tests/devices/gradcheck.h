#pragma once
// Gradient checks for the autograd tests: the tape's gradients of a scalar projection of f's
// output against central finite differences, in f64.
//
//   check_gradients([](const std::vector<Tensor>& in) { return mul(in[0], in[1]); },
//                   {random_f64({2, 3}, 1), random_f64({3}, 2)});
#include <catch2/catch.hpp>

#include <functional>
#include <vector>

#include "devices/autograd/grad_mode.h"
#include "devices/ops.h"
#include "devices/random.h"

namespace troupe::testing {

inline Tensor random_f64(const Shape& shape, uint64_t seed, double low = -1.0, double high = 1.0) {
  manual_seed(seed);
  return rand_uniform(shape, low, high, DType::f64);
}

// Floating inputs get requires_grad (all of them, or those flagged in `differentiate`).
inline void check_gradients(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                            std::vector<bool> differentiate = {}, double eps = 1e-6, double tolerance = 1e-6) {
  if (differentiate.empty()) differentiate.assign(inputs.size(), true);
  for (size_t i = 0; i < inputs.size(); ++i)
    differentiate[i] = differentiate[i] && is_floating(inputs[i].dtype());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (differentiate[i]) inputs[i].set_requires_grad(true);
  const Tensor out = f(inputs);
  const Tensor projection = random_f64(out.shape(), 99);  // a generic direction: no gradient cancels by symmetry
  sum(mul(out, projection)).backward();
  auto value = [&](const std::vector<Tensor>& in) {
    NoGradGuard no_grad;
    return sum(mul(f(in), projection)).item<double>();
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!differentiate[i]) continue;
    const Tensor grad = inputs[i].grad();
    REQUIRE(grad.defined());
    REQUIRE(grad.shape() == inputs[i].shape());
    const std::vector<double> analytic = grad.to_vector<double>();
    for (int64_t j = 0; j < inputs[i].numel(); ++j) {
      std::vector<Tensor> plus = inputs, minus = inputs;
      plus[i] = inputs[i].detach().clone();
      minus[i] = inputs[i].detach().clone();
      plus[i].mutable_data<double>()[j] += eps;
      minus[i].mutable_data<double>()[j] -= eps;
      const double numeric = (value(plus) - value(minus)) / (2 * eps);
      INFO("input " << i << " element " << j << ": tape " << analytic[j] << ", finite differences " << numeric);
      CHECK(std::abs(analytic[j] - numeric) <= tolerance * (1 + std::abs(numeric)));
    }
  }
}

}  // namespace troupe::testing
