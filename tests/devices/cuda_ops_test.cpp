// The cuda kernels against the fixtures and the host: every case under tests/fixtures/ops/ runs on
// cuda:0 and must match its expected values; ops without a fixture run on both devices and must
// agree; gather_nd's (and the other gathers') device-side index checks, dropout's statistics, and
// inputs on mixed devices. Without a GPU these tests are skipped (ctest reports them so), except
// the check that every op has a cuda kernel or a recorded reason, which reads only the op table.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>

#include "devices/backend.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "devices/registry.h"
#include "support/close.h"
#include "support/op_cases.h"
#include "support/skip.h"
#include "support/tensors.h"
#ifdef TROUPE_HAVE_CUDA
#include "devices/cuda/stream.h"
#endif

using namespace troupe;

namespace {

const Device cpu = Device::cpu();

#define SKIP_WITHOUT_CUDA() \
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason())

// The ops with no cuda kernel yet, and why. A fixture case of any other op without one fails; a
// line here for an op that has one fails too, so the list shrinks as kernels arrive.
const std::map<std::string, std::string> kNoCudaKernel = {
#ifndef TROUPE_HAVE_CUDNN
    {"conv2d", "built without cuDNN (devices/CMakeLists.txt found none next to the toolkit)"},
    {"conv2d_backward_input", "built without cuDNN"},
    {"conv2d_backward_weight", "built without cuDNN"},
#endif
};

bool has_cuda_kernel(const std::string& op) {
  return OpRegistry::global().get(op).kernels.contains(DeviceType::cuda);
}

std::vector<Tensor> on(const std::vector<Tensor>& xs, Device device) {
  std::vector<Tensor> out;
  for (const Tensor& x : xs) out.push_back(x.to(device));
  return out;
}

Tensor i32(const std::vector<int32_t>& v, const Shape& shape) { return Tensor::from_vector<int32_t>(v, shape); }

// Runs op on the host and on cuda:0 and compares every output (moved back) with the host's.
void check_same_on_both(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs = {},
                        double rtol = 1e-5, double atol = 1e-6) {
  INFO(op << " " << attrs.str());
  const std::vector<Tensor> want = call_op(op, inputs, attrs);
  const std::vector<Tensor> got = call_op(op, on(inputs, gpu), attrs);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("output " << i);
    CHECK(got[i].device() == gpu);
    check_close(got[i].to(cpu), want[i], {.rtol = rtol, .atol = atol});
  }
}

}  // namespace

TEST_CASE("every op has a cuda kernel or a recorded reason", "[cuda]") {
#ifndef TROUPE_HAVE_CUDA
  SKIP_TEST("built without nvcc: no cuda kernels");
#else
  std::vector<std::string> neither, stale;
  for (const std::string& op : OpRegistry::global().names())
    if (!has_cuda_kernel(op) && !kNoCudaKernel.contains(op)) neither.push_back(op);
  for (const auto& [op, why] : kNoCudaKernel)
    if (!OpRegistry::global().contains(op) || has_cuda_kernel(op)) stale.push_back(op);
  CHECK(neither == std::vector<std::string>{});  // write the kernel, or add the op to kNoCudaKernel saying why
  CHECK(stale == std::vector<std::string>{});    // kNoCudaKernel lines for ops that now have a kernel
#endif
}

TEST_CASE("cuda ops match the NumPy/PyTorch fixtures", "[cuda][fixtures]") {
  SKIP_WITHOUT_CUDA();
  const std::vector<std::filesystem::path> dirs = op_case_dirs();
  REQUIRE(dirs.size() >= 40);
  std::vector<std::string> waiting;  // cases of ops in kNoCudaKernel
  for (const auto& dir : dirs) {
    const std::string name = dir.filename().string();
    INFO("fixture " << name);
    try {
      const OpCase c = read_op_case(dir);
      if (!has_cuda_kernel(c.op)) {
        if (kNoCudaKernel.contains(c.op)) waiting.push_back(name);
        else FAIL_CHECK(name << ": op " << c.op << " has no cuda kernel (and no line in kNoCudaKernel)");
        continue;
      }
      const std::vector<Tensor> got = call_op(c.op, on(c.inputs, gpu), c.attrs);
      CHECK(got.size() == c.outputs.size());
      if (got.size() != c.outputs.size()) continue;
      for (size_t i = 0; i < got.size(); ++i) {
        INFO("output " << i);
        CHECK(got[i].device() == gpu);
        check_close(got[i].to(cpu), c.outputs[i], {.rtol = std::max(c.rtol, 1e-4), .atol = c.atol});
      }
    } catch (const std::exception& e) {  // one failing case must not hide the others
      FAIL_CHECK(name << ": " << e.what());
    }
  }
  if (!waiting.empty()) {
    std::string names;
    for (const std::string& w : waiting) names += " " + w;
    WARN("fixture cases of ops without a cuda kernel yet (kNoCudaKernel):" << names);
  }
}

TEST_CASE("cuda elementwise ops without fixtures match the host", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor a = Tensor::from_vector<float>({-1.5f, -0.0f, 0.0f, 2.0f, nan, 3.0f}, {2, 3});
  const Tensor b = Tensor::from_vector<float>({0.5f, 2.0f, nan}, {3});
  const Tensor ints = i32({-3, 0, 7, -2147483647, 5, 1}, {2, 3});
  for (const char* op : {"abs", "neg", "relu"}) {
    check_same_on_both(op, {a});
    check_same_on_both(op, {ints});
  }
  for (const char* op : {"sqrt", "log", "exp", "tanh", "sigmoid"}) {
    check_same_on_both(op, {random_tensor({3, 5}, 1, 0.1f, 4.0f)});
    check_same_on_both(op, {random_tensor({3, 5}, 2, 0.1f, 4.0f).to(DType::f64)});
  }
  check_same_on_both("sqrt", {i32({0, 1, 4, 9}, {4})});  // integers give f32
  for (const char* op : {"maximum", "minimum"}) {
    check_same_on_both(op, {a, b});  // NaN wins, broadcasting
    check_same_on_both(op, {ints, i32({2, -1, 6}, {3})});
  }
  for (const char* op : {"eq", "ne", "lt", "le", "gt", "ge"}) {
    check_same_on_both(op, {a, b});
    check_same_on_both(op, {ints, Tensor::from_vector<float>({0.0f, 7.0f, -3.0f}, {3})});  // promoted to f32
    check_same_on_both(op, {Tensor::from_vector<bool>({true, false}, {2, 1}),
                            Tensor::from_vector<bool>({true, false}, {2})});
  }
  // Backward kernels, one operand a transposed view.
  const Tensor g = random_tensor({4, 6}, 3);
  const Tensor saved = random_tensor({6, 4}, 4, -0.9f, 0.9f).transpose(0, 1);
  for (const char* op : {"relu_backward", "tanh_backward", "sigmoid_backward"}) check_same_on_both(op, {g, saved});
  check_same_on_both("gelu_backward", {g, saved});
  check_same_on_both("gelu_backward", {g, saved}, {{"approximate", std::string("tanh")}});
  check_same_on_both("tanh_backward", {g.to(DType::f64), saved.to(DType::f64)}, {}, 1e-12, 1e-12);
  check_same_on_both("bmm", {random_tensor({3, 4, 5}, 5), random_tensor({3, 5, 2}, 6)}, {}, 1e-5, 1e-5);
}

TEST_CASE("cuda reductions, softmax and joins without fixtures match the host", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = random_tensor({3, 4, 5}, 7);
  const Tensor with_nan = Tensor::from_vector<float>({1, 5, 5, 2, nan, 3, 0, 0, -1}, {3, 3});
  for (const char* op : {"max", "min", "mean", "sum"}) {  // f32 sums accumulate in float on cuda, double on the host
    check_same_on_both(op, {x}, {{"dims", std::vector<int64_t>{0, 2}}}, 1e-5, 1e-5);  // reduced dims not adjacent
    check_same_on_both(op, {x}, {{"dims", std::vector<int64_t>{-1}}, {"keepdim", true}}, 1e-5, 1e-5);
    check_same_on_both(op, {x.to(DType::f64)}, {}, 1e-12, 1e-12);
  }
  for (const char* op : {"max", "min"}) {
    check_same_on_both(op, {with_nan}, {{"dims", std::vector<int64_t>{1}}});
    check_same_on_both(op, {i32({4, -9, 2, 7, 7, 0}, {2, 3})}, {{"dims", std::vector<int64_t>{0}}});
    check_same_on_both(op, {Tensor::from_vector<bool>({false, true, false, false}, {2, 2})},
                       {{"dims", std::vector<int64_t>{1}}});
  }
  check_same_on_both("sum", {Tensor::from_vector<bool>({true, true, false}, {3})});
  check_same_on_both("mean", {x.to(DType::f16)}, {{"dims", std::vector<int64_t>{1}}}, 1e-3, 1e-3);
  check_same_on_both("argmax", {with_nan}, {{"dims", std::vector<int64_t>{1}}});  // NaN wins, first of ties
  check_same_on_both("argmax", {with_nan}, {{"dims", std::vector<int64_t>{0}}, {"keepdim", true}});
  check_same_on_both("argmax", {i32({3, 9, 9, 1, 9, 0}, {6})});
  check_same_on_both("argmax", {random_tensor({2, 1000}, 8)}, {{"dims", std::vector<int64_t>{1}}});
  check_same_on_both("log_softmax", {x}, {{"dim", int64_t{0}}});
  check_same_on_both("log_softmax", {x.to(DType::f64)}, {}, 1e-12, 1e-12);
  // Joins of strided views and empty inputs, any dtype.
  const Tensor t = random_tensor({5, 3}, 9).transpose(0, 1);
  check_same_on_both("cat", {t, random_tensor({3, 2}, 10), Tensor::zeros({3, 0})}, {{"dim", int64_t{1}}});
  check_same_on_both("cat", {i64({1, 2, 3, 4}, {2, 2}), i64({5, 6}, {1, 2})});
  check_same_on_both("stack", {t.to(DType::f16), t.to(DType::f16)}, {{"dim", int64_t{-1}}});
  check_same_on_both("flip", {x.permute({2, 0, 1})}, {{"dims", std::vector<int64_t>{0, 2}}});
  check_same_on_both("flip", {Tensor::from_vector<bool>({true, false, false}, {3})},
                     {{"dims", std::vector<int64_t>{0}}});
  check_same_on_both("index_select", {x.transpose(0, 2), i32({3, 0, 3}, {3})}, {{"dim", int64_t{1}}});
  check_same_on_both("embedding", {i64({2, 0, 1, 2}, {2, 2}), random_tensor({3, 4}, 11).to(DType::bf16)});
  check_same_on_both("where", {Tensor::from_vector<bool>({true, false, true}, {3, 1}), i32({1, 2}, {2}),
                               Tensor::from_vector<float>({0.5f}, {})});
  check_same_on_both("gather_nd", {x.transpose(0, 1), i64({0, 2, -1, 1, 2, 0, 1, -3}, {4, 2, 1})},
                     {{"batch_dims", int64_t{1}}});
  check_same_on_both("split", {x}, {{"size", int64_t{2}}, {"dim", int64_t{1}}});
}

TEST_CASE("cuda losses and their gradients match the host", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  const Tensor logits = random_tensor({6, 5}, 12);
  const Tensor log_probs = log_softmax(logits, 1);
  const Tensor target = i64({0, 4, -100, 2, 2, 1}, {6});  // one ignored sample
  const Tensor weight = Tensor::from_vector<float>({1.0f, 0.5f, 2.0f, 1.5f, 0.25f}, {5});
  for (const std::string reduction : {"mean", "sum", "none"}) {
    const Attrs attrs{{"reduction", reduction}};
    const Tensor grad = reduction == "none" ? random_tensor({6}, 13) : Tensor::scalar<float>(0.75f);
    check_same_on_both("nll_loss", {log_probs, target}, attrs);
    check_same_on_both("nll_loss", {log_probs, target.to(DType::i32), weight}, attrs);
    check_same_on_both("cross_entropy", {logits, target}, attrs);
    check_same_on_both("cross_entropy", {logits, target, weight}, attrs);
    check_same_on_both("cross_entropy", {logits.to(DType::f64), target, weight.to(DType::f64)}, attrs, 1e-12, 1e-12);
    check_same_on_both("nll_loss_backward", {grad, log_probs, target, weight}, attrs);
    check_same_on_both("cross_entropy_backward", {grad, logits, target}, attrs);
    check_same_on_both("cross_entropy_backward", {grad, logits, target.to(DType::i32), weight}, attrs);
  }
  check_same_on_both("cross_entropy", {logits, i64({0, 4, 3, 2, 2, 1}, {6})}, {{"ignore_index", int64_t{2}}});
  // Every sample ignored: a mean over no weight is NaN on both.
  check_same_on_both("nll_loss", {log_probs, i64(std::vector<int64_t>(6, -100), {6})});
}

TEST_CASE("cuda gathers check indices on the device: IndexError at the next copy to the host", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  const Tensor data = Tensor::arange(12).reshape({4, 3}).to(gpu);
  const Tensor y = gather_nd(data, i64({1, 7, -1}, {3, 1}).to(gpu));  // queued: no error yet
  CHECK(y.device() == gpu);
  try {
    y.to(cpu);
    FAIL("an out-of-range index must be an IndexError at the copy to the host");
  } catch (const IndexError& e) {
    CHECK_THAT(e.what(), Catch::Contains("gather_nd") && Catch::Contains("index 7") &&
                             Catch::Contains("dim 0 of size 4") && Catch::Contains("cuda:0"));
  }
  // Reported once; the bad row holds zeros, the others their slices (-1 wraps).
  CHECK(y.to(cpu).to_vector<float>() == std::vector<float>{3, 4, 5, 0, 0, 0, 9, 10, 11});
  CHECK(gather_nd(data, i64({3, -4}, {2, 1}).to(gpu)).to_vector<float>() ==
        std::vector<float>{9, 10, 11, 0, 1, 2});  // in range: no error left behind

  gather_nd(data, i64({0, 0, 0, 3}, {2, 2}).to(gpu));
#ifdef TROUPE_HAVE_CUDA
  CHECK_THROWS_AS(cuda::synchronize(0), IndexError);  // a synchronisation reports it too
#endif
  index_select(data, 1, i32({0, 3}, {2}).to(gpu));
  CHECK_THROWS_WITH(Tensor::zeros({1}, DType::f32, gpu).to(cpu),
                    Catch::Contains("index_select") && Catch::Contains("index 3"));
  embedding(i64({-1}, {1}).to(gpu), data);
  CHECK_THROWS_WITH(Tensor::zeros({1}, DType::f32, gpu).item<float>(),
                    Catch::Contains("embedding") && Catch::Contains("index -1"));
  nll_loss(Tensor::zeros({2, 3}, DType::f32, gpu), i64({1, 5}, {2}).to(gpu));
  CHECK_THROWS_AS(Tensor::zeros({1}, DType::f32, gpu).to(cpu), IndexError);
  CHECK_NOTHROW(Tensor::zeros({1}, DType::f32, gpu).to(cpu));
}

TEST_CASE("cuda dropout keeps 1 - p of the elements, scaled, and its backward reuses the mask", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  const double p = 0.3;
  const Tensor x = Tensor::ones({512, 1024}, DType::f32, gpu);
  manual_seed(7);
  const std::vector<Tensor> out = call_op("dropout", {x}, {{"p", p}});
  REQUIRE(out.size() == 2);
  CHECK(out[1].dtype() == DType::boolean);
  CHECK(out[1].shape() == x.shape());
  const std::vector<bool> mask = out[1].to_vector<bool>();
  const std::vector<float> y = out[0].to_vector<float>();
  const float kept_value = static_cast<float>(1.0 / (1.0 - p));
  int64_t kept = 0, kept_pairs = 0, mismatched = 0;
  for (size_t i = 0; i < mask.size(); ++i) {
    kept += mask[i];
    if (i + 1 < mask.size()) kept_pairs += mask[i] && mask[i + 1];
    mismatched += y[i] != (mask[i] ? kept_value : 0.0f);
  }
  const double n = static_cast<double>(mask.size());
  CHECK(std::abs(kept / n - (1 - p)) < 0.005);                  // sd ~ 0.0006
  CHECK(std::abs(kept_pairs / n - (1 - p) * (1 - p)) < 0.005);  // neighbours independent
  CHECK(mismatched == 0);
  for (int64_t row : {0, 255, 511}) {  // no row stuck
    int64_t row_kept = 0;
    for (int64_t j = 0; j < 1024; ++j) row_kept += mask[row * 1024 + j];
    CHECK(std::abs(row_kept / 1024.0 - (1 - p)) < 0.1);
  }
  // The backward applies the same mask.
  const Tensor g = Tensor::full({512, 1024}, 2.0, DType::f32, gpu);
  const std::vector<float> dx = call_op("dropout_backward", {g, out[1]}, {{"p", p}})[0].to_vector<float>();
  int64_t wrong = 0;
  for (size_t i = 0; i < dx.size(); ++i) wrong += dx[i] != 2.0f * y[i];
  CHECK(wrong == 0);
  // The seed decides the mask; the next call draws another.
  const Tensor next = call_op("dropout", {x}, {{"p", p}})[1];
  manual_seed(7);
  CHECK(call_op("dropout", {x}, {{"p", p}})[1].to_vector<bool>() == mask);
  CHECK(next.to_vector<bool>() != mask);
  // dropout2d: whole channels.
  const Tensor images = Tensor::ones({8, 16, 5, 5}, DType::f32, gpu);
  const std::vector<Tensor> channels = call_op("dropout2d", {images}, {{"p", 0.5}});
  CHECK(channels[1].shape() == Shape{8, 16, 1, 1});
  const std::vector<bool> channel_mask = channels[1].to_vector<bool>();
  const std::vector<float> yc = channels[0].to_vector<float>();
  int64_t broken = 0;
  for (size_t i = 0; i < yc.size(); ++i) broken += yc[i] != (channel_mask[i / 25] ? 2.0f : 0.0f);
  CHECK(broken == 0);
  // Not training, or p = 0: the identity and an empty mask; p = 1 zeroes everything.
  const std::vector<Tensor> off = call_op("dropout", {x}, {{"p", p}, {"training", false}});
  CHECK(off[0].shares_storage_with(x));
  CHECK(off[1].numel() == 0);
  CHECK(off[1].device() == gpu);
  CHECK(sum(call_op("dropout", {x}, {{"p", 1.0}})[0]).item<float>() == 0.0f);
}

TEST_CASE("cuda ops refuse inputs on different devices, naming the op", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  const Tensor host = Tensor::ones({2, 3});
  const Tensor dev = host.to(gpu);
  const Tensor mask = Tensor::from_vector<bool>({true, false, true, true, false, true}, {2, 3});
  const std::vector<std::pair<std::string, std::vector<Tensor>>> calls = {
      {"cat", {dev, host}},
      {"stack", {host, dev}},
      {"where", {mask.to(gpu), dev, host}},
      {"gather_nd", {dev, i64({0}, {1, 1})}},
      {"index_select", {dev, i64({0}, {1}).to(cpu)}},
      {"embedding", {i64({0}, {1}).to(gpu), host}},
      {"nll_loss", {dev, i64({0, 1}, {2})}},
      {"dropout_backward", {dev, mask}},
      {"maximum", {dev, host}},
  };
  for (const auto& [op, inputs] : calls) {
    INFO(op);
    CHECK_THROWS_AS(call_op(op, inputs), DeviceError);
    CHECK_THROWS_WITH(call_op(op, inputs), Catch::StartsWith(op + ":") && Catch::Contains("different devices"));
  }
}
