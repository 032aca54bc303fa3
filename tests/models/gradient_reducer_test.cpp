#include <catch2/catch.hpp>

#include "devices/error.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "models/nn/net.h"
#include "models/train/gradient_reducer.h"
#include "models/train/wide_net.h"
#include "support/ranks.h"

using namespace troupe;
using namespace troupe::models;

namespace {

// A world of one: its average is the identity, so the reduced gradients must equal plain
// backward's bit for bit (the 2-rank run is in data_test.cpp).
net::ProcessGroup& solo() {
  static std::shared_ptr<net::ProcessGroup> group = world_of_one();
  return *group;
}

Tensor batch_loss(Net& net) {
  manual_seed(7);  // the same dropout masks on every call
  Tensor x = rand_uniform({4, 1, 28, 28}, -1, 1);
  Tensor y = Tensor::from_vector<int64_t>({3, 1, 4, 1}, {4});
  return nll_loss(net(x), y);
}

}  // namespace

TEST_CASE("GradientReducer: buckets in reverse order, launched from inside backward", "[reducer]") {
  manual_seed(1);
  Net net;
  // linear packs a weight on its second use (another GEMM kernel, other rounding): warm up first.
  batch_loss(net).backward();
  net.zero_grad();
  batch_loss(net).backward();
  std::vector<Tensor> plain;
  for (Tensor* p : net.parameters()) plain.push_back(p->grad().clone());

  // 87 KB of parameters: one 1 MB bucket; 32 KB buckets cut after fc1.weight (fc2 and fc1: 66 KB)
  // and hold the convolutions (21 KB) in the second.
  CHECK(GradientReducer(solo(), net.parameters()).buckets() == 1);
  GradientReducer reducer(solo(), net.parameters(), 32 * 1024);
  REQUIRE(reducer.buckets() == 2);
  // The shapes its all_reduces take (what a new group is warmed up for): every parameter once.
  const std::vector<int64_t> counts = GradientReducer::bucket_counts(net.parameters(), 32 * 1024);
  REQUIRE(counts.size() == 2);
  int64_t total = 0;
  for (Tensor* p : net.parameters()) total += p->numel();
  CHECK(counts[0] + counts[1] == total);
  CHECK(counts[0] * 4 >= 32 * 1024);  // the first bucket closes once it holds 32 KB
  CHECK(GradientReducer::bucket_counts(net.parameters()) == std::vector<int64_t>{total});
  GradientReducer::warm_up(solo(), counts, DType::f32);
  CHECK_THROWS_AS(GradientReducer::bucket_counts(net.parameters(), 0), ValueError);
  for (int pass = 0; pass < 2; ++pass) {
    net.zero_grad();
    batch_loss(net).backward();
    reducer.finish();
    CHECK(reducer.launched_early() == 2);  // every parameter got its gradient during backward
    const auto params = net.parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      INFO("parameter " << i << " pass " << pass);
      CHECK(max(abs(sub(params[i]->grad(), plain[i]))).item<float>() == 0.0f);
    }
  }
}

TEST_CASE("GradientReducer: a parameter without a gradient is reduced as zeros at finish", "[reducer]") {
  manual_seed(2);
  WideNet net({.conv1 = 2, .conv2 = 4, .hidden = 8, .dropout = 0});
  GradientReducer reducer(solo(), net.parameters(), 1);  // one bucket per parameter
  CHECK(reducer.buckets() == 8);
  net.zero_grad();
  // Only fc2 takes part: its two buckets go during backward, the other six at finish().
  Tensor h = rand_uniform({3, 8}, -1, 1);
  sum(net.fc2(h)).backward();
  reducer.finish();
  CHECK(reducer.launched_early() == 2);
  CHECK(max(abs(net.fc1.weight.grad())).item<float>() == 0.0f);
  CHECK(net.fc1.weight.grad().shape() == net.fc1.weight.shape());
  // d sum(h W^T + b) / d b = the batch size for every output.
  CHECK(min(net.fc2.bias.grad()).item<float>() == 3.0f);
}

TEST_CASE("GradientReducer: errors", "[reducer][errors]") {
  CHECK_THROWS_AS(GradientReducer(solo(), {}), ValueError);
  Tensor w = rand_uniform({3}, -1, 1).set_requires_grad();
  Tensor made = mul(w, w);  // not a leaf
  CHECK_THROWS_WITH(GradientReducer(solo(), {&made}), Catch::Contains("not a leaf"));
  Tensor plain = Tensor::zeros({2});
  CHECK_THROWS_AS(GradientReducer(solo(), {&plain}), ValueError);
  Tensor w64 = Tensor::zeros({2}, DType::f64).set_requires_grad();
  CHECK_THROWS_AS(GradientReducer(solo(), {&w, &w64}), DTypeError);
  CHECK_THROWS_AS(GradientReducer(solo(), {&w}, 0), ValueError);
  {
    GradientReducer reducer(solo(), {&w});
    // w reaches the loss along two edges of one node: two accumulations in one pass.
    CHECK_THROWS_WITH(sum(mul(w, w)).backward(), Catch::Contains("second gradient") && Catch::Contains("f32[3]"));
  }
  // The hooks go with the reducer.
  w.set_grad(Tensor());
  sum(mul(w, w)).backward();
  CHECK(w.grad().shape() == Shape{3});
}
