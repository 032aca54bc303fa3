#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "devices/cpu/gemm.h"
#include "devices/ops.h"
#include "devices/registry.h"
#include "devices/threads.h"
#include "support/close.h"

using namespace troupe;

namespace {

Tensor random_tensor(const Shape& shape, DType dtype, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<double> values(static_cast<size_t>(numel(shape)));
  for (double& v : values) v = uniform(rng);
  return Tensor::from_vector<double>(values, shape).to(dtype);
}

Tensor random_ints(const Shape& shape, DType dtype, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> uniform(-9, 9);
  std::vector<int64_t> values(static_cast<size_t>(numel(shape)));
  for (int64_t& v : values) v = uniform(rng);
  return Tensor::from_vector<int64_t>(values, shape).to(dtype);
}

// The naive triple loop in double over (already transposed) operands of rank >= 2, batch dims
// broadcast; also the sum of |a||b| per element (at least 1), the scale a rounding error is relative to.
struct Reference {
  Shape shape;
  std::vector<double> values, scale;
};

Reference naive_matmul(const Tensor& a, const Tensor& b) {
  const Shape batch = broadcast_shapes("test", Shape(a.shape().begin(), a.shape().end() - 2),
                                       Shape(b.shape().begin(), b.shape().end() - 2));
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  Shape sa = batch, sb = batch, out = batch;
  sa.insert(sa.end(), {m, k});
  sb.insert(sb.end(), {k, n});
  out.insert(out.end(), {m, n});
  const std::vector<double> av = a.expand(sa).to_vector<double>(), bv = b.expand(sb).to_vector<double>();
  Reference r{out, std::vector<double>(static_cast<size_t>(numel(out))), std::vector<double>(static_cast<size_t>(numel(out)))};
  for (int64_t t = 0; t < numel(batch); ++t)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, scale = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = av[(t * m + i) * k + p], y = bv[(t * k + p) * n + j];
          sum += x * y;
          scale += std::abs(x * y);
        }
        r.values[(t * m + i) * n + j] = sum;
        r.scale[(t * m + i) * n + j] = std::max(1.0, scale);
      }
  return r;
}

// got within rtol of each element's scale.
void check_product(const Tensor& got, const Reference& want, double rtol) {
  check_close(got.to(DType::f64), Tensor::from_vector<double>(want.values, want.shape),
              {.rtol = rtol, .scale = Tensor::from_vector<double>(want.scale, want.shape)});
}

double rtol_for(DType t) { return t == DType::f64 ? 1e-12 : 1e-5; }

}  // namespace

TEST_CASE("matmul of small matrices by hand", "[matmul]") {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector<float>({7, 8, 9, 10, 11, 12}, {3, 2});
  CHECK(matmul(a, b).to_vector<float>() == std::vector<float>{58, 64, 139, 154});
  CHECK(matmul(a, a, false, true).to_vector<float>() == std::vector<float>{14, 32, 32, 77});
  CHECK(matmul(a, a, true, false).shape() == Shape{3, 3});
  CHECK(matmul(a, a, true, false).to_vector<float>() == std::vector<float>{17, 22, 27, 22, 29, 36, 27, 36, 45});
}

TEST_CASE("matmul matches the naive loop for every transpose, f32 and f64", "[matmul]") {
  const int64_t m = 37, k = 53, n = 29;
  for (DType dtype : {DType::f32, DType::f64})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        INFO(name(dtype) << " transpose_a=" << ta << " transpose_b=" << tb);
        const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, dtype, 1);
        const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, dtype, 2);
        const Reference want = naive_matmul(ta ? a.transpose(0, 1) : a, tb ? b.transpose(0, 1) : b);
        check_product(matmul(a, b, ta, tb), want, rtol_for(dtype));
        // Batched, with broadcast batch dims: [2,1,..] @ [3,..] -> [2,3,..].
        const Tensor ab = random_tensor(ta ? Shape{2, 1, k, m} : Shape{2, 1, m, k}, dtype, 3);
        const Tensor bb = random_tensor(tb ? Shape{3, n, k} : Shape{3, k, n}, dtype, 4);
        const Reference want_batched =
            naive_matmul(ta ? ab.transpose(-2, -1) : ab, tb ? bb.transpose(-2, -1) : bb);
        check_product(matmul(ab, bb, ta, tb), want_batched, rtol_for(dtype));
      }
}

TEST_CASE("matmul reads strided views in place or copies them when it must", "[matmul][views]") {
  const Tensor big = random_tensor({20, 30}, DType::f32, 5);
  const Tensor b = random_tensor({12, 7}, DType::f32, 6);
  // Rows with a leading dimension larger than the width.
  const Tensor rows = big.slice(0, 2, 11).slice(1, 3, 15);
  check_product(matmul(rows, b), naive_matmul(rows, b), 1e-5);
  // A transposed view without the flag, and the flag on a transposed view.
  const Tensor cols = big.slice(1, 0, 12).slice(0, 0, 9).transpose(0, 1);  // [12, 9], rows unit-stride
  check_product(matmul(cols, random_tensor({9, 4}, DType::f32, 7)),
              naive_matmul(cols, random_tensor({9, 4}, DType::f32, 7)), 1e-5);
  check_product(matmul(cols, cols, true, false), naive_matmul(cols.transpose(0, 1), cols), 1e-5);
  // Neither dim unit-stride: a copy first.
  const Tensor every_other = big.slice(1, 0, 24, 2).slice(0, 0, 20, 2);  // [10, 12]
  check_product(matmul(every_other, b), naive_matmul(every_other, b), 1e-5);
  // Stride-0 (expanded) operands.
  const Tensor row = random_tensor({1, 12}, DType::f32, 8).expand({5, 12});
  check_product(matmul(row, b), naive_matmul(row, b), 1e-5);
  const Tensor shared = random_tensor({12, 7}, DType::f32, 9).unsqueeze(0).expand({4, 12, 7});
  const Tensor batch = random_tensor({4, 3, 12}, DType::f32, 10);
  check_product(matmul(batch, shared), naive_matmul(batch, shared), 1e-5);
  check_product(bmm(batch, shared), naive_matmul(batch, shared), 1e-5);
}

TEST_CASE("matmul folds the batch into rows or loops over it", "[matmul]") {
  const Tensor w = random_tensor({16, 24}, DType::f32, 11);
  // [B,T,K] @ [K,N]: one GEMM over B*T rows.
  const Tensor x = random_tensor({3, 5, 16}, DType::f32, 12);
  check_product(matmul(x, w), naive_matmul(x, w), 1e-5);
  // Rows that do not fuse (a slice of T) and a transposed a: a GEMM per batch.
  const Tensor sliced = random_tensor({3, 8, 16}, DType::f32, 13).slice(1, 1, 6);
  check_product(matmul(sliced, w), naive_matmul(sliced, w), 1e-5);
  const Tensor xt = random_tensor({3, 16, 5}, DType::f32, 14);
  check_product(matmul(xt, w, true, false), naive_matmul(xt.transpose(-2, -1), w), 1e-5);
  // One row per batch, rows a fixed stride apart: still one GEMM (lda = that stride).
  const Tensor spaced = random_tensor({6, 16}, DType::f32, 38).slice(0, 0, 6, 2).unsqueeze(1);
  check_product(matmul(spaced, w), naive_matmul(spaced, w), 1e-5);
  // A shared a against a batch of b: [M,K] @ [B,K,N].
  const Tensor bs = random_tensor({2, 3, 24, 6}, DType::f64, 15);
  const Tensor a = random_tensor({4, 24}, DType::f64, 16);
  check_product(matmul(a, bs), naive_matmul(a, bs), 1e-12);
}

TEST_CASE("matmul promotes 1-d operands and squeezes them away", "[matmul]") {
  const Tensor v = Tensor::from_vector<double>({1, 2, 3}, {3});
  const Tensor m = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor dot = matmul(v, v);
  CHECK(dot.shape() == Shape{});
  CHECK(dot.item<double>() == 14);
  CHECK(matmul(v, m).shape() == Shape{2});
  CHECK(matmul(v, m).to_vector<double>() == std::vector<double>{22, 28});
  CHECK(matmul(m, v.slice(0, 0, 2), false, false).to_vector<double>() == std::vector<double>{5, 11, 17});
  // Transpose flags do not touch a 1-d operand.
  CHECK(matmul(m, v, true, true).to_vector<double>() == std::vector<double>{22, 28});
  const Tensor batch = random_tensor({4, 2, 3}, DType::f32, 17);
  const Tensor vf = v.to(DType::f32);
  Tensor bv = matmul(batch, vf);
  CHECK(bv.shape() == Shape{4, 2});
  check_product(bv.unsqueeze(-1), naive_matmul(batch, vf.unsqueeze(-1)), 1e-5);
  Tensor vb = matmul(vf.slice(0, 0, 2), batch);
  CHECK(vb.shape() == Shape{4, 3});
  check_product(vb.unsqueeze(-2), naive_matmul(vf.slice(0, 0, 2).unsqueeze(0), batch), 1e-5);
}

TEST_CASE("matmul in f16, bf16, i32 and i64", "[matmul][dtypes]") {
  for (DType dtype : {DType::f16, DType::bf16}) {
    const Tensor a = random_tensor({6, 10}, dtype, 18), b = random_tensor({10, 5}, dtype, 19);
    const Tensor c = matmul(a, b);
    CHECK(c.dtype() == dtype);
    // Inputs exact in f32; the result rounds once to the 16-bit type.
    check_product(c, naive_matmul(a, b), dtype == DType::f16 ? 2e-3 : 1e-2);
  }
  for (DType dtype : {DType::i32, DType::i64}) {
    const Tensor a = random_ints({2, 4, 7}, dtype, 20), b = random_ints({7, 3}, dtype, 21);
    const Tensor c = matmul(a, b);
    CHECK(c.dtype() == dtype);
    const Reference want = naive_matmul(a, b);
    CHECK(c.to_vector<double>() == want.values);
    const Tensor at = random_ints({7, 4}, dtype, 22);
    CHECK(matmul(at, b, true, false).to_vector<double>() == naive_matmul(at.transpose(0, 1), b).values);
  }
  // Integer products wrap like PyTorch instead of overflowing into undefined behaviour.
  const Tensor big = Tensor::from_vector<int32_t>({1 << 30, 1 << 30}, {1, 2});
  CHECK(matmul(big, Tensor::from_vector<int32_t>({2, 2}, {2, 1})).item<int32_t>() == 0);
}

TEST_CASE("bmm multiplies matching batches", "[matmul][bmm]") {
  const Tensor a = random_tensor({3, 4, 5}, DType::f32, 23), b = random_tensor({3, 5, 2}, DType::f32, 24);
  check_product(bmm(a, b), naive_matmul(a, b), 1e-5);
  const Tensor bt = random_tensor({3, 2, 5}, DType::f32, 25).transpose(1, 2);
  check_product(bmm(a, bt), naive_matmul(a, bt), 1e-5);
}

TEST_CASE("linear is x @ W^T + b over all leading dims", "[matmul][linear]") {
  const Tensor w = Tensor::from_vector<float>({1, 0, 2, -1, 1, 0}, {2, 3});
  const Tensor bias = Tensor::from_vector<float>({10, 20}, {2});
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(linear(x, w).to_vector<float>() == std::vector<float>{7, 1, 16, 1});
  CHECK(linear(x, w, bias).to_vector<float>() == std::vector<float>{17, 21, 26, 21});
  CHECK(linear(x.select(0, 1), w, bias).to_vector<float>() == std::vector<float>{26, 21});
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tensor x3 = random_tensor({2, 5, 33}, dtype, 26), w3 = random_tensor({17, 33}, dtype, 27);
    const Tensor b3 = random_tensor({17}, dtype, 28);
    const Reference product = naive_matmul(x3, w3.transpose(0, 1));
    check_product(linear(x3, w3), product, rtol_for(dtype));
    Reference with_bias = product;
    const std::vector<double> bv = b3.to_vector<double>();
    for (size_t i = 0; i < with_bias.values.size(); ++i) with_bias.values[i] += bv[i % 17];
    check_product(linear(x3, w3, b3), with_bias, rtol_for(dtype));
    // Strided input and a transposed weight view.
    const Tensor xs = x3.slice(1, 0, 5, 2);
    const Tensor wt = random_tensor({33, 17}, dtype, 29).transpose(0, 1);
    check_product(linear(xs, wt), naive_matmul(xs, wt.transpose(0, 1)), rtol_for(dtype));
  }
  const Tensor xi = random_ints({3, 4}, DType::i64, 30), wi = random_ints({2, 4}, DType::i64, 31);
  const Tensor bi = Tensor::from_vector<int64_t>({100, -100}, {2});
  std::vector<double> want = naive_matmul(xi, wi.transpose(0, 1)).values;
  for (size_t i = 0; i < want.size(); ++i) want[i] += i % 2 ? -100 : 100;
  CHECK(linear(xi, wi, bi).to_vector<double>() == want);
  const Tensor xh = random_tensor({3, 8}, DType::bf16, 32), wh = random_tensor({4, 8}, DType::bf16, 33);
  CHECK(linear(xh, wh).dtype() == DType::bf16);
  check_product(linear(xh, wh), naive_matmul(xh, wh.transpose(0, 1)), 1e-2);
}

TEST_CASE("matmul, bmm and linear with zero-size dims", "[matmul][empty]") {
  CHECK(matmul(Tensor::zeros({0, 3}), Tensor::zeros({3, 4})).shape() == Shape{0, 4});
  CHECK(matmul(Tensor::zeros({2, 3}), Tensor::zeros({3, 0})).shape() == Shape{2, 0});
  const Tensor empty_k = matmul(Tensor::zeros({2, 0}), Tensor::zeros({0, 3}));
  CHECK(empty_k.shape() == Shape{2, 3});
  CHECK(empty_k.to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(matmul(Tensor::zeros({0, 2, 3}, DType::f64), Tensor::zeros({3, 4}, DType::f64)).shape() == Shape{0, 2, 4});
  CHECK(matmul(Tensor::zeros({2, 0}, DType::i32), Tensor::zeros({0, 2}, DType::i32)).to_vector<int32_t>() ==
        std::vector<int32_t>(4, 0));
  CHECK(bmm(Tensor::zeros({0, 2, 3}), Tensor::zeros({0, 3, 4})).shape() == Shape{0, 2, 4});
  CHECK(linear(Tensor::zeros({0, 3}), Tensor::zeros({2, 3})).shape() == Shape{0, 2});
  // No in-features: the output is the bias alone.
  const Tensor bias_only = linear(Tensor::zeros({2, 0}), Tensor::zeros({3, 0}), Tensor::from_vector<float>({1, 2, 3}, {3}));
  CHECK(bias_only.to_vector<float>() == std::vector<float>{1, 2, 3, 1, 2, 3});
}

TEST_CASE("matmul, bmm and linear errors name the op and the operands", "[matmul][errors]") {
  const Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4, 5});
  CHECK_THROWS_AS(matmul(a, b), ShapeError);
  CHECK_THROWS_WITH(matmul(a, b), "matmul: f32[2,3] @ f32[4,5]: inner dimensions 3 and 4 differ");
  CHECK_THROWS_WITH(matmul(a, Tensor::zeros({2, 3}), false, false), Catch::Contains("inner dimensions 3 and 2"));
  CHECK_NOTHROW(matmul(a, Tensor::zeros({2, 3}), true, false));
  CHECK_THROWS_AS(matmul(a, Tensor::zeros({3, 2}, DType::f64)), DTypeError);
  CHECK_THROWS_WITH(matmul(a, Tensor::zeros({3, 2}, DType::f64)),
                    Catch::Contains("matmul") && Catch::Contains("f32[2,3]") && Catch::Contains("f64[3,2]"));
  CHECK_THROWS_AS(matmul(Tensor::zeros({2, 2}, DType::u8), Tensor::zeros({2, 2}, DType::u8)), DTypeError);
  CHECK_THROWS_WITH(matmul(Tensor::zeros({2, 2}, DType::boolean), Tensor::zeros({2, 2}, DType::boolean)),
                    Catch::Contains("matmul") && Catch::Contains("unsupported dtype bool"));
  CHECK_THROWS_AS(matmul(Tensor::zeros({}), a), ShapeError);
  CHECK_THROWS_WITH(matmul(Tensor::zeros({}), a), Catch::Contains("matmul") && Catch::Contains("f32[]"));
  CHECK_THROWS_AS(matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 4})), ShapeError);
  CHECK_THROWS_WITH(matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 4})), Catch::Contains("matmul"));

  CHECK_THROWS_AS(bmm(a, Tensor::zeros({3, 2})), ShapeError);
  CHECK_THROWS_WITH(bmm(a, Tensor::zeros({3, 2})), Catch::Contains("bmm") && Catch::Contains("3-d"));
  CHECK_THROWS_WITH(bmm(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 4})),
                    Catch::Contains("bmm") && Catch::Contains("batch sizes 2 and 3"));
  CHECK_THROWS_WITH(bmm(Tensor::zeros({2, 2, 3}), Tensor::zeros({2, 4, 4})),
                    Catch::Contains("bmm") && Catch::Contains("inner dimensions 3 and 4"));
  CHECK_THROWS_AS(bmm(Tensor::zeros({2, 2, 3}), Tensor::zeros({2, 3, 4}, DType::f64)), DTypeError);

  const Tensor w = Tensor::zeros({4, 3});
  CHECK_THROWS_AS(linear(Tensor::zeros({2, 5}), w), ShapeError);
  CHECK_THROWS_WITH(linear(Tensor::zeros({2, 5}), w),
                    Catch::Contains("linear") && Catch::Contains("f32[2,5]") && Catch::Contains("f32[4,3]"));
  CHECK_THROWS_AS(linear(Tensor::zeros({2, 3}), Tensor::zeros({3})), ShapeError);
  CHECK_THROWS_AS(linear(Tensor::zeros({}), w), ShapeError);
  CHECK_THROWS_AS(linear(Tensor::zeros({2, 3}), w, Tensor::zeros({3})), ShapeError);
  CHECK_THROWS_WITH(linear(Tensor::zeros({2, 3}), w, Tensor::zeros({3})),
                    Catch::Contains("linear") && Catch::Contains("bias"));
  CHECK_THROWS_AS(linear(Tensor::zeros({2, 3}), w, Tensor::zeros({4}, DType::f64)), DTypeError);
  CHECK_THROWS_AS(linear(Tensor::zeros({2, 3}, DType::f64), w), DTypeError);
  CHECK_THROWS_AS(call_op("linear", {a, w, Tensor::zeros({4}), Tensor::zeros({4})}), ValueError);
  CHECK_THROWS_AS(call_op("matmul", {a, a}, {{"transpose_a", int64_t{1}}}), ValueError);
}

TEST_CASE("gemm entry points: backend choice, zero sizes, bad leading dimensions", "[gemm]") {
  const GemmChoice& choice = gemm_choice();
  CHECK((choice.backend == "onednn" || choice.backend == "openblas"));
  CHECK_FALSE(choice.reason.empty());
  const std::string before = choice.backend;

  // k == 0: C = beta * C, without reading A or B.
  std::vector<float> c = {1, 2, 3, 4};
  gemm_f32(false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.5f, c.data(), 2);
  CHECK(c == std::vector<float>{0.5f, 1, 1.5f, 2});
  std::vector<double> d = {1, std::nan("")};
  gemm_f64(false, false, 1, 2, 0, 1.0, nullptr, 1, nullptr, 2, 0.0, d.data(), 2);
  CHECK(d == std::vector<double>{0, 0});
  CHECK_THROWS_AS(gemm_f32(false, false, 2, 2, 2, 1.0f, c.data(), 1, c.data(), 2, 0.0f, c.data(), 2), ValueError);
  CHECK_THROWS_WITH(gemm_f64(false, true, 2, 2, 3, 1.0, d.data(), 3, d.data(), 2, 0.0, d.data(), 2),
                    Catch::Contains("gemm_f64") && Catch::Contains("ldb=2"));
  CHECK_THROWS_AS(gemm_f32(false, false, -1, 2, 2, 1.0f, c.data(), 2, c.data(), 2, 0.0f, c.data(), 2), ValueError);

  // Both backends give the same product; "auto" returns to the process's own choice.
  const Tensor a = random_tensor({9, 13}, DType::f32, 34), b = random_tensor({13, 6}, DType::f32, 35);
  for (const char* backend : {"onednn", "openblas"}) {
    set_gemm_backend(backend);
    CHECK(gemm_choice().backend == backend);
    check_product(matmul(a, b, false, false), naive_matmul(a, b), 1e-5);
  }
  set_gemm_backend("auto");
  CHECK(gemm_choice().backend == before);
  CHECK_THROWS_AS(set_gemm_backend("mkl"), ValueError);
  CHECK_THROWS_WITH(set_gemm_backend("mkl"), Catch::Contains("mkl"));
}

TEST_CASE("intra-op thread settings", "[threads]") {
  CHECK(hardware_cores() >= 1);
  const int before = intra_op_threads();
  CHECK(before >= 1);
  set_intra_op_threads(1);
  CHECK(intra_op_threads() == 1);
  set_thread_intra_op_threads(3);  // the per-thread setting wins while set
  CHECK(intra_op_threads() == 3);
  CHECK(thread_intra_op_threads() == 3);
  apply_intra_op_threads();
  set_thread_intra_op_threads(0);
  CHECK(intra_op_threads() == 1);
  // A product runs under whatever count was applied last.
  const Tensor a = random_tensor({40, 30}, DType::f32, 36), b = random_tensor({30, 20}, DType::f32, 37);
  check_product(matmul(a, b), naive_matmul(a, b), 1e-5);
  CHECK_THROWS_AS(set_intra_op_threads(0), ValueError);
  CHECK_THROWS_WITH(set_intra_op_threads(-2), Catch::Contains("set_intra_op_threads"));
  CHECK_THROWS_AS(set_thread_intra_op_threads(-1), ValueError);
  set_intra_op_threads(before);
  CHECK(intra_op_threads() == before);
}
