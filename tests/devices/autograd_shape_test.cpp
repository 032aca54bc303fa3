// Gradient checks for the ops and Tensor methods that move elements: views, copies, joins, cuts
// and gathers (f64, against central finite differences).
#include <catch2/catch.hpp>

#include "devices/registry.h"
#include "tests/devices/gradcheck.h"

using namespace troupe;
using testing::check_gradients;
using testing::random_f64;

using Inputs = std::vector<Tensor>;

TEST_CASE("autograd: view methods") {
  const Inputs in{random_f64({2, 3, 4}, 1)};
  check_gradients([](const Inputs& x) { return x[0].reshape({4, 6}); }, in);
  check_gradients([](const Inputs& x) { return x[0].view({6, 4}); }, in);
  check_gradients([](const Inputs& x) { return x[0].transpose(0, 2).contiguous(); }, in);
  check_gradients([](const Inputs& x) { return x[0].permute({1, 2, 0}); }, in);
  check_gradients([](const Inputs& x) { return x[0].slice(2, 1, 4, 2); }, in);
  check_gradients([](const Inputs& x) { return x[0].select(1, -1); }, in);
  check_gradients([](const Inputs& x) { return x[0].unsqueeze(1).squeeze(1).squeeze(); }, in);
  check_gradients([](const Inputs& x) { return x[0].slice(0, 0, 1).expand({3, 3, 4}); }, in);
  check_gradients([](const Inputs& x) { return x[0].clone().flatten(); }, in);
  check_gradients([](const Inputs& x) { return x[0].to(DType::f32).to(DType::f64); }, in, {}, 1e-3, 1e-4);
}

TEST_CASE("autograd: view ops through the registry") {
  const Inputs in{random_f64({2, 3, 4}, 2)};
  check_gradients([](const Inputs& x) { return call_op("reshape", {x[0]}, {{"shape", std::vector<int64_t>{3, 8}}})[0]; }, in);
  check_gradients([](const Inputs& x) { return call_op("transpose", {x[0]}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}})[0]; }, in);
  check_gradients([](const Inputs& x) { return call_op("permute", {x[0]}, {{"dims", std::vector<int64_t>{2, 0, 1}}})[0]; }, in);
  check_gradients([](const Inputs& x) { return call_op("unsqueeze", {x[0]}, {{"dim", int64_t{-1}}})[0]; }, in);
  check_gradients([](const Inputs& x) { return call_op("cast", {x[0]}, {{"dtype", std::string("f64")}})[0]; }, in);
}

TEST_CASE("autograd: cat, stack, split, chunk, flip") {
  const Inputs in{random_f64({2, 3}, 3), random_f64({2, 1}, 4), random_f64({2, 2}, 5)};
  check_gradients([](const Inputs& x) { return cat(x, 1); }, in);
  check_gradients([](const Inputs& x) { return stack({x[0], x[0]}, 1); }, {random_f64({2, 3}, 6)});
  check_gradients([](const Inputs& x) { return stack({x[0], x[1]}, -1); }, {random_f64({2, 3}, 6), random_f64({2, 3}, 7)});
  check_gradients([](const Inputs& x) { return split(x[0], 2, 1)[1]; }, {random_f64({2, 5}, 8)});  // one piece used
  check_gradients([](const Inputs& x) {
    auto pieces = split(x[0], std::vector<int64_t>{1, 3, 1}, 1);
    return mul(pieces[0], pieces[2]);
  }, {random_f64({2, 5}, 9)});
  check_gradients([](const Inputs& x) { return chunk(x[0], 3, 0)[2]; }, {random_f64({5, 2}, 10)});
  check_gradients([](const Inputs& x) { return flip(x[0], {0, 1}); }, {random_f64({2, 3}, 11)});
}

TEST_CASE("autograd: index_select and embedding add gradients where indices repeat") {
  const Tensor index = Tensor::from_vector<int64_t>({2, 0, 2, 1}, {4});
  check_gradients([&](const Inputs& x) { return index_select(x[0], 1, index); }, {random_f64({2, 3, 2}, 12)});
  const Tensor ids = Tensor::from_vector<int64_t>({1, 3, 1, 0, 3, 3}, {2, 3});
  check_gradients([&](const Inputs& x) { return embedding(ids, x[0]); }, {random_f64({4, 3}, 13)});
  // Hand-computed: rows picked twice get twice the gradient.
  Tensor w = Tensor::zeros({3, 2}, DType::f64).set_requires_grad();
  sum(embedding(Tensor::from_vector<int64_t>({2, 2, 0}, {3}), w)).backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{1, 1, 0, 0, 2, 2});
}

TEST_CASE("autograd: gather_nd adds gradients where index rows repeat, with batch dims and negative indices") {
  const Tensor rows = Tensor::from_vector<int64_t>({0, 1, 2, 3, 0, 1, -3, -4}, {4, 2});
  check_gradients([&](const Inputs& x) { return gather_nd(x[0], rows); }, {random_f64({3, 4, 2}, 14)});
  const Tensor batched = Tensor::from_vector<int32_t>({1, 1, 0, 2, 0, 2}, {2, 3, 1});
  check_gradients([&](const Inputs& x) { return gather_nd(x[0], batched, 1); }, {random_f64({2, 3, 2}, 15)});
}
