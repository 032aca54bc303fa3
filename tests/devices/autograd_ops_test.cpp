// Gradient checks (tape vs central finite differences, f64) for the elementwise ops with
// broadcasting, where, reductions, matrix products, softmax, log_softmax and layer_norm.
#include <catch2/catch.hpp>

#include "tests/devices/gradcheck.h"

using namespace troupe;
using testing::check_gradients;
using testing::random_f64;

using Inputs = std::vector<Tensor>;

TEST_CASE("autograd: add, sub, mul, div with broadcasting sum gradients back to each shape") {
  const Inputs in{random_f64({2, 3, 4}, 1), random_f64({3, 1}, 2, 0.5, 1.5)};
  check_gradients([](const Inputs& x) { return add(x[0], x[1]); }, in);
  check_gradients([](const Inputs& x) { return sub(x[0], x[1]); }, in);
  check_gradients([](const Inputs& x) { return mul(x[0], x[1]); }, in);
  check_gradients([](const Inputs& x) { return div(x[0], x[1]); }, in);
  check_gradients([](const Inputs& x) { return div(x[1], x[0].slice(0, 0, 1).squeeze(0)); },
                  {random_f64({1, 3, 4}, 3, 0.5, 2), random_f64({4}, 4)});
  check_gradients([](const Inputs& x) { return maximum(x[0], x[1]); }, {random_f64({3, 4}, 5), random_f64({4}, 6)});
  check_gradients([](const Inputs& x) { return minimum(x[0], x[1]); }, {random_f64({3, 4}, 5), random_f64({4}, 6)});
}

TEST_CASE("autograd: unary ops") {
  const Inputs in{random_f64({3, 5}, 7)};
  const Inputs positive{random_f64({3, 5}, 8, 0.2, 2.0)};
  check_gradients([](const Inputs& x) { return neg(x[0]); }, in);
  check_gradients([](const Inputs& x) { return exp(x[0]); }, in);
  check_gradients([](const Inputs& x) { return log(x[0]); }, positive);
  check_gradients([](const Inputs& x) { return sqrt(x[0]); }, positive);
  check_gradients([](const Inputs& x) { return abs(x[0]); }, in);
  check_gradients([](const Inputs& x) { return tanh(x[0]); }, in);
  check_gradients([](const Inputs& x) { return sigmoid(x[0]); }, in);
  check_gradients([](const Inputs& x) { return relu(x[0]); }, in);
  check_gradients([](const Inputs& x) { return gelu(x[0]); }, in);
  check_gradients([](const Inputs& x) { return gelu(x[0], true); }, in);
}

TEST_CASE("autograd: sum and mean over dims, with and without keepdim") {
  const Inputs in{random_f64({2, 3, 4}, 9)};
  check_gradients([](const Inputs& x) { return sum(x[0]); }, in);
  check_gradients([](const Inputs& x) { return sum(x[0], {0, 2}); }, in);
  check_gradients([](const Inputs& x) { return mean(x[0], {-1}, true); }, in);
  check_gradients([](const Inputs& x) { return mean(x[0]); }, in);
}

TEST_CASE("autograd: max and min over dims, ties sharing the gradient") {
  const Inputs in{random_f64({2, 3, 4}, 10)};
  check_gradients([](const Inputs& x) { return max(x[0]); }, in);
  check_gradients([](const Inputs& x) { return max(x[0], {1}); }, in);
  check_gradients([](const Inputs& x) { return min(x[0], {0, 2}, true); }, in);
  // Like PyTorch's amax: two equal maxima get half the gradient each.
  Tensor x = Tensor::from_vector<double>({1, 3, 3, 2}, {4}).set_requires_grad();
  max(x).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0.5, 0.5, 0});
}

TEST_CASE("autograd: where sends the gradient to x where the condition holds, to y elsewhere") {
  const Tensor condition = Tensor::from_vector<bool>({true, false, false, true, true, false}, {2, 3});
  check_gradients([&](const Inputs& x) { return where(condition, x[0], x[1]); },
                  {random_f64({2, 3}, 11), random_f64({3}, 12)});  // y broadcast over the rows
}

TEST_CASE("autograd: matmul in every form, bmm and linear") {
  check_gradients([](const Inputs& x) { return matmul(x[0], x[1]); }, {random_f64({3, 4}, 1), random_f64({4, 2}, 2)});
  check_gradients([](const Inputs& x) { return matmul(x[0], x[1], true, false); },
                  {random_f64({4, 3}, 1), random_f64({4, 2}, 2)});
  check_gradients([](const Inputs& x) { return matmul(x[0], x[1], true, true); },
                  {random_f64({4, 3}, 1), random_f64({2, 4}, 2)});
  check_gradients([](const Inputs& x) { return matmul(x[0], x[1], false, true); },
                  {random_f64({2, 3, 4}, 1), random_f64({5, 4}, 2)});  // b broadcast over the batch
  check_gradients([](const Inputs& x) { return matmul(x[0], x[1]); }, {random_f64({4}, 1), random_f64({2, 4, 3}, 2)});
  check_gradients([](const Inputs& x) { return matmul(x[0], x[1]); }, {random_f64({2, 3, 4}, 1), random_f64({4}, 2)});
  check_gradients([](const Inputs& x) { return matmul(x[0], x[1]); }, {random_f64({4}, 1), random_f64({4}, 2)});
  check_gradients([](const Inputs& x) { return bmm(x[0], x[1]); }, {random_f64({2, 3, 4}, 1), random_f64({2, 4, 2}, 2)});
  check_gradients([](const Inputs& x) { return linear(x[0], x[1], x[2]); },
                  {random_f64({2, 3, 4}, 1), random_f64({5, 4}, 2), random_f64({5}, 3)});
  check_gradients([](const Inputs& x) { return linear(x[0], x[1]); }, {random_f64({3, 4}, 1), random_f64({2, 4}, 2)});
}

TEST_CASE("autograd: softmax and log_softmax over any dim") {
  const Inputs in{random_f64({3, 4, 2}, 11, -2, 2)};
  check_gradients([](const Inputs& x) { return softmax(x[0], -1); }, in);
  check_gradients([](const Inputs& x) { return softmax(x[0], 1); }, in);
  check_gradients([](const Inputs& x) { return log_softmax(x[0], 0); }, in);
  check_gradients([](const Inputs& x) { return log_softmax(x[0], -1); }, in);
}

TEST_CASE("autograd: layer_norm with and without weight and bias") {
  const Tensor x = random_f64({3, 2, 4}, 12, -2, 2), w = random_f64({2, 4}, 13), b = random_f64({2, 4}, 14);
  check_gradients([](const Inputs& in) { return layer_norm(in[0], {2, 4}, in[1], in[2]); }, {x, w, b});
  check_gradients([](const Inputs& in) { return layer_norm(in[0], {4}, in[1]); }, {x, random_f64({4}, 15)});
  check_gradients([](const Inputs& in) { return layer_norm(in[0], {4}); }, {x});
  // The kernel directly: bad shapes are ShapeErrors naming the op.
  CHECK_THROWS_WITH(layer_norm_backward(x, x, {3}), Catch::Contains("layer_norm_backward") && Catch::Contains("[3]"));
  CHECK_THROWS_AS(layer_norm_backward(x, x.to(DType::f32), {4}), ShapeError);
}

TEST_CASE("autograd: activation backward kernels check their operands") {
  const Tensor g = random_f64({2, 3}, 1);
  CHECK_THROWS_WITH(relu_backward(g, random_f64({3, 2}, 2)), Catch::Contains("relu_backward") && Catch::Contains("f64[3,2]"));
  CHECK_THROWS_AS(tanh_backward(g, g.to(DType::f32)), DTypeError);
  CHECK_THROWS_AS(sigmoid_backward(Tensor::zeros({2, 3}, DType::i64), Tensor::zeros({2, 3}, DType::i64)), DTypeError);
  // Strided operands read in place.
  const Tensor y = Tensor::from_vector<double>({1, -1, 2, -2, 0, 3}, {3, 2});
  CHECK(relu_backward(Tensor::ones({2, 3}, DType::f64), y.transpose(0, 1)).to_vector<double>() ==
        std::vector<double>{1, 1, 0, 0, 0, 1});
}
