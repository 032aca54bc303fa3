// The cuda backend: copies, streams and each cuda kernel against host loops. On a machine without
// a GPU (or a build without nvcc) every test but the first is skipped (ctest reports them so).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <thread>

#include "devices/backend.h"
#include "devices/ops.h"
#include "devices/tensor.h"
#include "support/close.h"
#include "support/skip.h"
#include "support/tensors.h"
#ifdef TROUPE_HAVE_CUDA
#include "devices/cuda/stream.h"
#endif

using namespace troupe;

namespace {

#define SKIP_WITHOUT_CUDA() \
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason())

// Host reference of an elementwise function of x.
template <class Fn>
std::vector<float> map(const Tensor& x, Fn fn) {
  std::vector<float> v = x.to_vector<float>();
  for (float& e : v) e = static_cast<float>(fn(double(e)));
  return v;
}

std::vector<float> host_matmul(const Tensor& a, const Tensor& b) {  // [M,K] @ [K,N], in double
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  const auto av = a.to_vector<float>(), bv = b.to_vector<float>();
  std::vector<float> c(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += double(av[i * k + p]) * bv[p * n + j];
      c[i * n + j] = static_cast<float>(s);
    }
  return c;
}

}  // namespace

TEST_CASE("cuda backend reports itself or why it is absent", "[cuda]") {
  if (!has_backend(DeviceType::cuda)) {
    CHECK_FALSE(cuda_unavailable_reason().empty());
    CHECK_THROWS_AS(Tensor::zeros({2}, DType::f32, gpu), DeviceError);
    CHECK_THROWS_WITH(Tensor::zeros({2}, DType::f32, gpu), Catch::Contains("cuda"));
    return;  // what a machine without a GPU can check, it has
  }
  DeviceBackend& b = backend(DeviceType::cuda);
  CHECK(b.device_count() >= 1);
  CHECK_THAT(b.describe(), Catch::Contains("cuda:0"));
  CHECK(cuda_unavailable_reason().empty());
  const int missing = b.device_count();
  CHECK_THROWS_AS(Tensor::zeros({2}, DType::f32, Device::cuda(missing)), DeviceError);
  CHECK_THROWS_WITH(Tensor::zeros({2}, DType::f32, Device::cuda(missing)),
                    Catch::Contains("cuda:" + std::to_string(missing)));
#ifdef TROUPE_HAVE_CUDA
  CHECK_THROWS_AS(cuda::Stream(missing), DeviceError);
#endif
}

TEST_CASE("cuda round trips keep every dtype's values", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  const std::vector<double> values{0, 1, -2.5, 3, 1024, -0.125};  // exact in every floating dtype
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO(name(t));
    Tensor host = Tensor::from_vector<double>(values, {2, 3}).to(t);
    Tensor dev = host.to(gpu);
    CHECK(dev.device() == gpu);
    CHECK(dev.meta().str() == std::string(name(t)) + "[2,3]@cuda:0");
    CHECK(dev.to(Device::cpu()).to_vector<double>() == values);
    CHECK(dev.to_vector<double>() == values);  // to_vector reads through the host itself
  }
  CHECK(Tensor::from_vector<int32_t>({-7, 0, 2147483647}, {3}).to(gpu).to_vector<int32_t>() ==
        std::vector<int32_t>{-7, 0, 2147483647});
  CHECK(Tensor::from_vector<int64_t>({-1, int64_t(1) << 40}, {2}).to(gpu).to_vector<int64_t>() ==
        std::vector<int64_t>{-1, int64_t(1) << 40});
  CHECK(Tensor::from_vector<uint8_t>({0, 255, 7}, {3}).to(gpu).to_vector<uint8_t>() ==
        std::vector<uint8_t>{0, 255, 7});
  CHECK(Tensor::from_vector<bool>({true, false, true}, {3}).to(gpu).to_vector<bool>() ==
        std::vector<bool>{true, false, true});
  CHECK(Tensor::full({2, 2}, 1.5, DType::f32, gpu).to_vector<float>() == std::vector<float>(4, 1.5f));
  CHECK(Tensor::zeros({0, 3}, DType::f32, gpu).to_vector<float>().empty());
  CHECK(Tensor::scalar<float>(4.0f).to(gpu).item<float>() == 4.0f);
}

TEST_CASE("cuda uploads from pageable memory of many pieces land whole", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  // 8 MiB and up go through two pinned pieces in turn; an odd size ends on a partial piece.
  for (int64_t n : {int64_t(2) << 20, (int64_t(5) << 20) + 3}) {
    INFO(n << " floats");
    std::vector<float> values(static_cast<size_t>(n));
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1000003);
    const Tensor host = Tensor::from_vector<float>(values, {n});
    for (int round = 0; round < 3; ++round) CHECK(host.to(gpu).to_vector<float>() == values);
  }
}

TEST_CASE("cuda strided copies and conversions stay on the device", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  Tensor host = random_tensor({3, 4, 5}, 1);
  Tensor dev = host.to(gpu);
  // Views of a cuda tensor made contiguous on the device match the same views on the host.
  const std::vector<Tensor> host_views{host.transpose(0, 2), host.slice(1, 1, 4, 2), host.select(2, 3),
                                       host.permute({1, 2, 0}), host.select(0, 1).unsqueeze(0).expand({6, 4, 5})};
  const std::vector<Tensor> dev_views{dev.transpose(0, 2), dev.slice(1, 1, 4, 2), dev.select(2, 3),
                                      dev.permute({1, 2, 0}), dev.select(0, 1).unsqueeze(0).expand({6, 4, 5})};
  for (size_t i = 0; i < host_views.size(); ++i) {
    INFO("view " << i);
    Tensor c = dev_views[i].contiguous();
    CHECK(c.device() == gpu);
    CHECK(c.is_contiguous());
    CHECK(c.to_vector<float>() == host_views[i].to_vector<float>());
  }
  // Every dtype pair converts on the device exactly as on the host.
  const std::vector<DType> all{DType::f32, DType::f64, DType::f16, DType::bf16,
                               DType::i32, DType::i64, DType::u8,  DType::boolean};
  Tensor mixed = Tensor::from_vector<float>({0, 1, -3, 2.5f, 200, 0.1f, -0.75f, 65}, {2, 4});
  for (DType from : all)
    for (DType to : all) {
      if ((from == DType::u8 || to == DType::u8) && from != to) continue;  // negative values: C casts differ
      INFO(name(from) << " -> " << name(to));
      Tensor src = mixed.to(from);
      Tensor expected = src.transpose(0, 1).to(to);
      Tensor got = src.to(gpu).transpose(0, 1).to(to);
      CHECK(got.device() == gpu);
      CHECK(got.to_vector<double>() == expected.to_vector<double>());
    }
  // Writing through mutable_data copies first: the original stays intact.
  Tensor shared = dev;
  Tensor view = shared.select(0, 0);
  CHECK(view.mutable_raw_data() != dev.raw_data());
  CHECK(dev.to_vector<float>() == host.to_vector<float>());
  // Between devices through the host, and cuda -> cuda on one device is the same tensor.
  CHECK(dev.to(gpu).shares_storage_with(dev));
}

TEST_CASE("cuda binary ops broadcast like the host", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  Tensor a = random_tensor({2, 3, 4}, 2), b = random_tensor({3, 1}, 3, 0.5f, 2.0f);
  const auto ae = a.to_vector<float>(), be = b.expand({2, 3, 4}).to_vector<float>();
  auto reference = [&](auto fn) {
    std::vector<float> r(ae.size());
    for (size_t i = 0; i < r.size(); ++i) r[i] = fn(ae[i], be[i]);
    return r;
  };
  Tensor da = a.to(gpu), db = b.to(gpu);
  CHECK(add(da, db).shape() == Shape{2, 3, 4});
  CHECK(max_abs_diff(add(da, db).to_vector<float>(), reference([](float x, float y) { return x + y; })) == 0);
  CHECK(max_abs_diff(sub(da, db).to_vector<float>(), reference([](float x, float y) { return x - y; })) == 0);
  CHECK(max_abs_diff(mul(da, db).to_vector<float>(), reference([](float x, float y) { return x * y; })) == 0);
  CHECK(max_abs_diff(div(da, db).to_vector<float>(), reference([](float x, float y) { return x / y; })) < 1e-6);
  // Strided operands, a 0-d scalar, integers, promotion and integer division.
  CHECK(max_abs_diff(add(da.transpose(1, 2), da.transpose(1, 2)).to_vector<float>(),
                     map(a.transpose(1, 2), [](double x) { return 2 * x; })) == 0);
  CHECK(max_abs_diff(add(da, 1.0).to_vector<float>(), map(a, [](double x) { return float(x) + 1.0f; })) == 0);
  Tensor i = Tensor::from_vector<int32_t>({1, 2, 3, 7}, {4}).to(gpu);
  CHECK(add(i, i).to_vector<int32_t>() == std::vector<int32_t>{2, 4, 6, 14});
  CHECK(mul(i, i).dtype() == DType::i32);
  CHECK(div(i, Tensor::from_vector<int32_t>({2}, {1}).to(gpu)).to_vector<float>() ==
        std::vector<float>{0.5f, 1, 1.5f, 3.5f});
  CHECK(add(i, Tensor::scalar<float>(0.5f).to(gpu)).to_vector<float>() == std::vector<float>{1.5f, 2.5f, 3.5f, 7.5f});
  Tensor h = Tensor::from_vector<float>({1, 2, 3, 4}, {4}).to(DType::bf16).to(gpu);
  CHECK(mul(h, h).dtype() == DType::bf16);
  CHECK(mul(h, h).to_vector<float>() == std::vector<float>{1, 4, 9, 16});
  Tensor d = Tensor::from_vector<double>({1, 2}, {2}).to(gpu);
  CHECK(div(d, Tensor::scalar<double>(3).to(gpu)).to_vector<double>() == std::vector<double>{1.0 / 3, 2.0 / 3});
  // Mismatched devices are refused before any kernel runs.
  CHECK_THROWS_AS(add(da, b), DeviceError);
  CHECK_THROWS_WITH(add(da, b), Catch::Contains("add"));
}

TEST_CASE("cuda unary ops match host math", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  Tensor x = random_tensor({5, 7}, 4, -4, 4);
  Tensor dx = x.transpose(0, 1).to(gpu);  // strided input
  Tensor xt = x.transpose(0, 1);
  struct Case {
    const char* op;
    std::function<Tensor(const Tensor&)> run;
    std::function<double(double)> ref;
  };
  const std::vector<Case> cases{
      {"neg", [](const Tensor& t) { return neg(t); }, [](double v) { return -v; }},
      {"relu", [](const Tensor& t) { return relu(t); }, [](double v) { return v < 0 ? 0.0 : v; }},
      {"exp", [](const Tensor& t) { return exp(t); }, [](double v) { return std::exp(v); }},
      {"tanh", [](const Tensor& t) { return tanh(t); }, [](double v) { return std::tanh(v); }},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); }, [](double v) { return 1 / (1 + std::exp(-v)); }},
      {"gelu", [](const Tensor& t) { return gelu(t); },
       [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }},
      {"gelu", [](const Tensor& t) { return gelu(t, true); },
       [](double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); }},
  };
  for (const Case& c : cases) {
    INFO(c.op);
    Tensor y = c.run(dx);
    CHECK(y.device() == gpu);
    CHECK(y.shape() == Shape{7, 5});
    const auto got = y.to_vector<float>(), want = map(xt, c.ref);
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-5).margin(1e-6));
  }
  CHECK(relu(Tensor::from_vector<int64_t>({-3, 4}, {2}).to(gpu)).to_vector<int64_t>() == std::vector<int64_t>{0, 4});
  CHECK(neg(Tensor::from_vector<float>({1, -2}, {2}).to(DType::f16).to(gpu)).to_vector<float>() ==
        std::vector<float>{-1, 2});
  Tensor e = exp(Tensor::from_vector<int32_t>({0, 1}, {2}).to(gpu));
  CHECK(e.dtype() == DType::f32);
  CHECK(e.to_vector<float>()[1] == Approx(std::exp(1.0)));
}

TEST_CASE("cuda softmax, layer_norm and sum match host loops", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  Tensor x = random_tensor({4, 3, 37}, 5, -3, 3);
  const auto xv = x.to_vector<float>();
  {  // softmax
    for (int64_t dim : {-1, 1, 0}) {
      INFO("softmax dim " << dim);
      Tensor y = softmax(x.to(gpu), dim);
      CHECK(y.shape() == x.shape());
      Tensor moved = x.transpose(dim < 0 ? 2 : dim, 2).contiguous();  // reference rows along dim
      const auto mv = moved.to_vector<float>();
      const int64_t n = moved.size(2);
      std::vector<float> want(mv.size());
      for (size_t r = 0; r < mv.size() / n; ++r) {
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < n; ++j) mx = std::max(mx, double(mv[r * n + j]));
        for (int64_t j = 0; j < n; ++j) s += std::exp(mv[r * n + j] - mx);
        for (int64_t j = 0; j < n; ++j) want[r * n + j] = float(std::exp(mv[r * n + j] - mx) / s);
      }
      const auto got = y.transpose(dim < 0 ? 2 : dim, 2).to_vector<float>();
      CHECK(max_abs_diff(got, want) < 1e-6);
    }
  }
  {  // layer_norm
    Tensor w = random_tensor({37}, 6), b = random_tensor({37}, 7);
    const auto wv = w.to_vector<float>(), bv = b.to_vector<float>();
    Tensor y = layer_norm(x.to(gpu), {37}, w.to(gpu), b.to(gpu), 1e-5);
    Tensor plain = layer_norm(x.to(gpu), {37});
    std::vector<float> want(xv.size()), want_plain(xv.size());
    for (size_t r = 0; r < xv.size() / 37; ++r) {
      double mean = 0, var = 0;
      for (int j = 0; j < 37; ++j) mean += xv[r * 37 + j];
      mean /= 37;
      for (int j = 0; j < 37; ++j) var += (xv[r * 37 + j] - mean) * (xv[r * 37 + j] - mean);
      const double inv = 1 / std::sqrt(var / 37 + 1e-5);
      for (int j = 0; j < 37; ++j) {
        want_plain[r * 37 + j] = float((xv[r * 37 + j] - mean) * inv);
        want[r * 37 + j] = float((xv[r * 37 + j] - mean) * inv * wv[j] + bv[j]);
      }
    }
    CHECK(max_abs_diff(y.to_vector<float>(), want) < 1e-5);
    CHECK(max_abs_diff(plain.to_vector<float>(), want_plain) < 1e-5);
  }
  {  // sum
    Tensor dx = x.to(gpu);
    Tensor last = sum(dx, {-1});
    CHECK(last.shape() == Shape{4, 3});
    std::vector<float> want(12, 0);
    for (size_t i = 0; i < xv.size(); ++i) want[i / 37] += xv[i];
    CHECK(max_abs_diff(last.to_vector<float>(), want) < 1e-4);
    CHECK(sum(dx, {-1}, true).shape() == Shape{4, 3, 1});
    std::vector<float> want0(3 * 37, 0);
    for (size_t i = 0; i < xv.size(); ++i) want0[i % (3 * 37)] += xv[i];
    CHECK(max_abs_diff(sum(dx, {0}).to_vector<float>(), want0) < 1e-5);
    double total = 0;
    for (float v : xv) total += v;
    CHECK(sum(dx).item<float>() == Approx(total).margin(1e-3));
    Tensor flags = Tensor::from_vector<bool>({true, true, false, true}, {2, 2}).to(gpu);
    CHECK(sum(flags, {1}).dtype() == DType::i64);
    CHECK(sum(flags, {1}).to_vector<int64_t>() == std::vector<int64_t>{2, 1});
  }
}

TEST_CASE("cuda matmul and linear match host products", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  Tensor a = random_tensor({5, 7}, 8), b = random_tensor({7, 3}, 9);
  const auto want = host_matmul(a, b);
  Tensor da = a.to(gpu), db = b.to(gpu);
  CHECK(max_abs_diff(matmul(da, db).to_vector<float>(), want) < 1e-5);
  // Transposed operands, as flags and as views, read without copies.
  Tensor at = a.transpose(0, 1).contiguous().to(gpu), bt = b.transpose(0, 1).contiguous().to(gpu);
  CHECK(max_abs_diff(matmul(at, bt, true, true).to_vector<float>(), want) < 1e-5);
  CHECK(max_abs_diff(matmul(at.transpose(0, 1), db).to_vector<float>(), want) < 1e-5);
  CHECK(max_abs_diff(matmul(da, bt, false, true).to_vector<float>(), want) < 1e-5);
  // Batches: broadcast [2,1,5,7] @ [3,7,3], and [B,T,K] @ [K,N] folded into one product.
  Tensor batch_a = random_tensor({2, 1, 5, 7}, 10), batch_b = random_tensor({3, 7, 3}, 11);
  Tensor got = matmul(batch_a.to(gpu), batch_b.to(gpu));
  REQUIRE(got.shape() == Shape{2, 3, 5, 3});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      CHECK(max_abs_diff(got.select(0, i).select(0, j).to_vector<float>(),
                         host_matmul(batch_a.select(0, i).select(0, 0), batch_b.select(0, j))) < 1e-5);
  Tensor seq = random_tensor({4, 6, 7}, 12);
  Tensor folded = matmul(seq.to(gpu), db);
  for (int64_t i = 0; i < 4; ++i)
    CHECK(max_abs_diff(folded.select(0, i).to_vector<float>(), host_matmul(seq.select(0, i), b)) < 1e-5);
  // 1-d operands, f64, bf16 and empty inner dims.
  Tensor v = random_tensor({7}, 13);
  CHECK(matmul(v.to(gpu), db).shape() == Shape{3});
  CHECK(max_abs_diff(matmul(v.to(gpu), db).to_vector<float>(), host_matmul(v.unsqueeze(0), b)) < 1e-5);
  CHECK(matmul(da, v.to(gpu)).shape() == Shape{5});
  const auto want64 = matmul(da.to(DType::f64), db.to(DType::f64)).to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) CHECK(want64[i] == Approx(want[i]).epsilon(1e-6));
  const auto got16 = matmul(da.to(DType::bf16), db.to(DType::bf16)).to_vector<float>();
  CHECK(max_abs_diff(got16, want) < 0.1);
  CHECK(matmul(Tensor::zeros({2, 0}, DType::f32, gpu), Tensor::zeros({0, 3}, DType::f32, gpu)).to_vector<float>() ==
        std::vector<float>(6, 0));
  // No integer GEMM on the device.
  Tensor ints = Tensor::from_vector<int32_t>({1, 2, 3, 4}, {2, 2}).to(gpu);
  CHECK_THROWS_AS(matmul(ints, ints), DeviceError);
  CHECK_THROWS_WITH(matmul(ints, ints), Catch::Contains("matmul") && Catch::Contains("i32"));

  Tensor x = random_tensor({2, 5, 7}, 14), w = random_tensor({3, 7}, 15), bias = random_tensor({3}, 16);
  Tensor y = linear(x.to(gpu), w.to(gpu), bias.to(gpu));
  REQUIRE(y.shape() == Shape{2, 5, 3});
  const auto wt = w.transpose(0, 1).contiguous();
  const auto bv = bias.to_vector<float>();
  for (int64_t i = 0; i < 2; ++i) {
    auto ref = host_matmul(x.select(0, i), wt);
    for (size_t e = 0; e < ref.size(); ++e) ref[e] += bv[e % 3];
    CHECK(max_abs_diff(y.select(0, i).to_vector<float>(), ref) < 1e-5);
  }
  CHECK(max_abs_diff(linear(x.select(0, 0).to(gpu), w.to(gpu)).to_vector<float>(),
                     host_matmul(x.select(0, 0), wt)) < 1e-5);
}

TEST_CASE("cuda matmul 2500x1024x4096 matches sampled host dot products", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  const int64_t m = 2500, k = 1024, n = 4096;
  Tensor a = random_tensor({m, k}, 17, -1, 1), b = random_tensor({k, n}, 18, -1, 1);
  Tensor c = matmul(a.to(gpu), b.to(gpu));
  REQUIRE(c.shape() == Shape{m, n});
  const auto cv = c.to_vector<float>();
  const float* av = a.data<float>();
  const float* bv = b.data<float>();
  std::mt19937 rng(19);
  double worst = 0;
  for (int s = 0; s < 512; ++s) {
    const int64_t i = rng() % m, j = rng() % n;
    double dot = 0;
    for (int64_t p = 0; p < k; ++p) dot += double(av[i * k + p]) * bv[p * n + j];
    worst = std::max(worst, std::abs(dot - cv[i * n + j]));
  }
  CHECK(worst < 1e-3);  // fp32 over 1024 terms of size <= 1
}

#ifdef TROUPE_HAVE_CUDA
TEST_CASE("cuda streams run independently: no implicit synchronisation", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  Tensor host = random_tensor({256, 256}, 20);
  Tensor x = host.to(gpu);  // queued on this thread's default stream
  cuda::Stream s1(0), s2(0);
  CHECK(s1.handle() != s2.handle());
  CHECK(cuda::current_stream(0) != s1.handle());
  s1.wait(cuda::current_stream(0));  // both streams read x only after its upload
  s2.wait(cuda::current_stream(0));
  // s1 is held by a host callback until s2 has finished: if either stream waited for the other,
  // s2 would never finish first and the callback would give up after its deadline.
  std::atomic<bool> release{false}, gave_up{false};
  Tensor y1, y2;
  {
    cuda::StreamGuard on(s1);
    CHECK(cuda::current_stream(0) == s1.handle());
    s1.then([&] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!release.load()) {
        if (std::chrono::steady_clock::now() > deadline) {
          gave_up = true;
          return;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    });
    y1 = x.to(DType::f64);  // queued behind the callback
  }
  CHECK(cuda::current_stream(0) != s1.handle());
  {
    cuda::StreamGuard on(s2);
    y2 = x.transpose(0, 1).contiguous();
    s2.synchronize();
  }
  CHECK(s2.done());
  CHECK_FALSE(s1.done());
  release = true;
  s1.synchronize();
  CHECK_FALSE(gave_up.load());
  CHECK(s1.done());
  cuda::synchronize(0);
  CHECK(y1.to_vector<double>() == host.to_vector<double>());
  CHECK(y2.to_vector<float>() == host.transpose(0, 1).to_vector<float>());
  {  // products on two streams at once, each read back after its own stream
    Tensor p1, p2;
    {
      cuda::StreamGuard on(s1);
      p1 = matmul(x, x);
    }
    {
      cuda::StreamGuard on(s2);
      p2 = matmul(x, x, true, false);
    }
    s1.synchronize();
    s2.synchronize();
    CHECK(max_abs_diff(p1.to_vector<float>(), host_matmul(host, host)) < 1e-3);
    CHECK(max_abs_diff(p2.to_vector<float>(), host_matmul(host.transpose(0, 1).contiguous(), host)) < 1e-3);
  }
}
#endif
