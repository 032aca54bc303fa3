// The tape itself: leaves and accumulation, shared handles, grad mode, detach, retain_graph, the
// version counter and every error path.
#include <catch2/catch.hpp>

#include "devices/autograd/grad_mode.h"
#include "devices/autograd/node.h"
#include "devices/ops.h"
#include "devices/registry.h"
#include "tests/devices/gradcheck.h"

using namespace troupe;

namespace {

Tensor vec(std::vector<double> v) { return Tensor::from_vector<double>(v, {static_cast<int64_t>(v.size())}); }

}  // namespace

TEST_CASE("autograd: a scalar's backward fills the leaves' grads and accumulates across calls") {
  Tensor x = vec({1, 2, 3}).set_requires_grad();
  Tensor w = vec({4, 5, 6}).set_requires_grad();
  Tensor loss = sum(mul(x, w));  // d/dx = w, d/dw = x
  CHECK(loss.requires_grad());
  CHECK_FALSE(loss.is_leaf());
  CHECK(loss.autograd_meta()->grad_fn->op == "sum");
  loss.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{4, 5, 6});
  CHECK(w.grad().to_vector<double>() == std::vector<double>{1, 2, 3});
  sum(mul(x, w)).backward();  // a fresh graph: gradients add up, like PyTorch
  CHECK(x.grad().to_vector<double>() == std::vector<double>{8, 10, 12});
  x.set_grad(Tensor());  // zero_grad: none
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("autograd: a tensor used twice gets the sum of both paths") {
  Tensor x = vec({1, -2}).set_requires_grad();
  Tensor y = add(mul(x, x), x);  // 2x + 1
  sum(y).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3, -3});
}

TEST_CASE("autograd: copies of a handle share requires_grad and grad; detach leaves the tape") {
  Tensor x = vec({1, 2}).set_requires_grad();
  Tensor alias = x;
  sum(mul(alias, 3.0)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 3});
  Tensor d = x.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.shares_storage_with(x));
  CHECK_FALSE(add(d, d).requires_grad());
}

TEST_CASE("autograd: no tape under NoGradGuard or without inputs that require grad") {
  Tensor x = vec({1, 2}).set_requires_grad();
  {
    NoGradGuard no_grad;
    CHECK_FALSE(grad_enabled());
    Tensor y = mul(x, 2.0);
    CHECK_FALSE(y.requires_grad());
    CHECK_FALSE(x.reshape({2, 1}).requires_grad());
    CHECK_FALSE(call_op("contiguous", {x})[0].requires_grad());  // a kernel that returns its input
  }
  CHECK(grad_enabled());
  CHECK_FALSE(mul(vec({1}), 2.0).requires_grad());
  CHECK_FALSE(argmax(x).requires_grad());  // integer outputs never require grad
  CHECK_FALSE(gt(x, x).requires_grad());
}

TEST_CASE("autograd: a gradient for a non-scalar output, and retain_graph") {
  Tensor x = vec({1, 2, 3}).set_requires_grad();
  Tensor y = mul(x, x);
  y.backward(vec({1, 0, -1}), /*retain_graph=*/true);
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 0, -6});
  y.backward(vec({1, 1, 1}));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{4, 4, 0});
  CHECK_THROWS_WITH(y.backward(vec({1, 1, 1})), Catch::Contains("mul") && Catch::Contains("second time"));
}

TEST_CASE("autograd: the Tensor view methods are on the tape") {
  Tensor x = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}).set_requires_grad();
  Tensor y = x.transpose(0, 1).reshape({6}).slice(0, 1, 5, 2);  // x^T flat is 1 4 2 5 3 6: picks 4, 5
  CHECK(y.to_vector<double>() == std::vector<double>{4, 5});
  sum(mul(y, vec({10, 20}))).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0, 0, 10, 20, 0});
}

TEST_CASE("autograd: backward on a leaf itself") {
  Tensor x = Tensor::scalar<double>(2).set_requires_grad();
  x.backward();
  CHECK(x.grad().item<double>() == 1);
}

TEST_CASE("autograd: modifying a tensor saved for backward is a ValueError naming the op") {
  Tensor x = vec({1, 2}).set_requires_grad();
  Tensor y = exp(x);  // exp saves its output
  Tensor z = sum(y);
  const Tensor before = y;
  y.mutable_data<double>()[0] = 5;  // copy-on-write: before and the saved value still read e^1
  CHECK(y.version() == 1);
  CHECK(before.to_vector<double>()[0] == Approx(std::exp(1.0)));
  CHECK_THROWS_AS(z.backward(), ValueError);
  CHECK_THROWS_WITH(sum(y).backward(), Catch::Contains("exp") && Catch::Contains("modified in place"));
}

TEST_CASE("autograd: modifying an input saved for backward is detected") {
  Tensor w = vec({1, 2}).set_requires_grad();
  Tensor x = vec({3, 4}).set_requires_grad();
  Tensor loss = sum(mul(x, w));
  w.mutable_data<double>()[0] = 7;
  CHECK_THROWS_WITH(loss.backward(), Catch::Contains("mul") && Catch::Contains("input 1"));
}

TEST_CASE("autograd: error paths") {
  Tensor x = vec({1, 2}).set_requires_grad();
  CHECK_THROWS_WITH(mul(x, 2.0).backward(), Catch::Contains("backward") && Catch::Contains("f64[2]"));
  CHECK_THROWS_AS(mul(x, 2.0).backward(), ShapeError);
  CHECK_THROWS_WITH(vec({1}).backward(), Catch::Contains("does not require grad"));
  CHECK_THROWS_AS(vec({1}).backward(), ValueError);
  CHECK_THROWS_AS(mul(x, 2.0).backward(vec({1, 2, 3})), ShapeError);
  CHECK_THROWS_AS(Tensor::from_vector<int64_t>({1}, {1}).set_requires_grad(), DTypeError);
  CHECK_THROWS_WITH(mul(x, 2.0).set_requires_grad(false), Catch::Contains("not a leaf"));
  CHECK_THROWS_AS(vec({1}).set_grad(vec({1})), ValueError);
  CHECK_THROWS_AS(x.set_grad(vec({1, 2, 3})), ShapeError);
  CHECK_THROWS_AS(Tensor().backward(), ValueError);
  // An op that is not differentiable fails when backward reaches it, naming it and why.
  Tensor r = sum(relu_backward(x, vec({1, 1})));
  CHECK(r.requires_grad());
  CHECK_THROWS_WITH(r.backward(), Catch::Contains("relu_backward") && Catch::Contains("no backward") &&
                                      Catch::Contains("gradients of gradients are not supported"));
}
