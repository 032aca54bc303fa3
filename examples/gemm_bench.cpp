// gemm_bench: single-precision GEMM rates for the products the models run, on 1 and 2 intra-op
// threads, against the core's FMA peak measured here (independent FMAs on registers, the widest
// vectors the kernels use). Through troupe::matmul (the library path), and through the packed
// weights that linear and lstm use (gemm_packed.h, this CPU's register tile).
//
//   gemm_bench                       # table, calibrated backend
//   gemm_bench --compare             # the chosen backend and OpenBLAS side by side
//   gemm_bench --json --threads 1,2  # one JSON line for notes and scripts
//   gemm_bench --products 259x1024x3072,259x4096x1024  # other M x K x N products
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>


#include "devices/cpu/gemm.h"
#include "devices/cpu/gemm_packed.h"
#include "devices/cpu/isa.h"
#include "devices/error.h"
#include "devices/ops.h"
#include "devices/threads.h"
#include "examples/command_line.h"
#include "examples/cpu_kernels.h"
#include "examples/json_line.h"
#include "examples/median_time.h"
#include "examples/run_example.h"

using namespace troupe;

namespace {

struct Product {
  int64_t m, k, n;
};

// 12 independent chains of FMAs on registers: what one core's FMA units can do at all.
template <class Step>
double fma_peak_gflops(int lanes, Step step) {
  double best = 0;
  for (int run = 0; run < 5; ++run) {
    const long iterations = 20'000'000;
    const auto start = std::chrono::steady_clock::now();
    step(iterations);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 12.0 * 2 * lanes * double(iterations) / seconds / 1e9);
  }
  return best;
}

[[gnu::target("avx2,fma")]] void fma_avx2(long iterations) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(0.001f * i);
  const __m256 x = _mm256_set1_ps(0.9999f), y = _mm256_set1_ps(1e-4f);
  for (long it = 0; it < iterations; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  for (int i = 1; i < 12; ++i) acc[0] = _mm256_add_ps(acc[0], acc[i]);
  volatile float sink = _mm256_cvtss_f32(acc[0]);
  (void)sink;
}

[[gnu::target("avx512f")]] void fma_avx512(long iterations) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  const __m512 x = _mm512_set1_ps(0.9999f), y = _mm512_set1_ps(1e-4f);
  for (long it = 0; it < iterations; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  for (int i = 1; i < 12; ++i) acc[0] = _mm512_add_ps(acc[0], acc[i]);
  volatile float sink = _mm512_cvtss_f32(acc[0]);
  (void)sink;
}

double core_peak_gflops() {
  return cpu_isa() >= CpuIsa::avx512 ? fma_peak_gflops(16, fma_avx512) : fma_peak_gflops(8, fma_avx2);
}

struct Row {
  std::string backend;
  Product product;
  int threads;
  double gflops;
  double peak_frac;
};

// Median seconds of `runs` calls after two warm-up calls.
double median_seconds(const Tensor& a, const Tensor& b, int runs) {
  for (int i = 0; i < 2; ++i) matmul(a, b);
  std::vector<double> seconds;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const Tensor c = matmul(a, b);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

std::vector<Row> measure(const std::string& backend, const std::vector<Product>& products,
                         const std::vector<int>& threads, int runs, double peak) {
  set_gemm_backend(backend);
  std::vector<Row> rows;
  for (const Product& p : products) {
    const Tensor a = Tensor::full({p.m, p.k}, 0.5);
    const Tensor b = Tensor::full({p.k, p.n}, 0.25);
    for (int t : threads) {
      set_intra_op_threads(t);
      const double gflops = 2.0 * double(p.m) * double(p.k) * double(p.n) / median_seconds(a, b, runs) / 1e9;
      rows.push_back({gemm_choice().backend, p, t, gflops, gflops / (peak * t)});
    }
  }
  return rows;
}

// C = A @ W^T through W's packed form, as linear (inference) and lstm run it.
std::vector<Row> measure_packed(const std::vector<Product>& products, const std::vector<int>& threads, int runs,
                                double peak) {
  std::vector<Row> rows;
  for (const Product& p : products) {
    const Tensor a = Tensor::full({p.m, p.k}, 0.5);
    const Tensor w = Tensor::full({p.n, p.k}, 0.25);
    const PackedWeight packed(w.data<float>(), p.n, p.k, p.k);
    Tensor c = Tensor::empty({p.m, p.n});
    for (int t : threads) {
      set_intra_op_threads(t);
      const double seconds = troupe::median_seconds(
          [&] { gemm_packed_f32(p.m, a.data<float>(), p.k, packed, 0.0f, c.mutable_data<float>(), p.n); }, runs, 2);
      const double gflops = 2.0 * double(p.m) * double(p.k) * double(p.n) / seconds / 1e9;
      rows.push_back({std::string("packed ") + gemm_packed_kernel(), p, t, gflops, gflops / (peak * t)});
    }
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  cli::App app{"GEMM rates through troupe::matmul"};
  bool json = false, compare = false;
  std::string backend = "auto";
  std::vector<int> threads{1, 2};
  int runs = 5;
  std::vector<std::string> shapes{"2500x1024x4096", "50x1024x4096", "259x1024x4096"};
  app.add_flag("--json", json, "print one JSON line instead of a table");
  app.add_option("--backend", backend, "GEMM library: onednn, openblas or auto (calibrated)")
      ->check(cli::IsMember({"onednn", "openblas", "auto"}));
  app.add_option("--threads", threads, "intra-op thread counts, e.g. 1,2")->delimiter(',')->check(cli::PositiveNumber);
  app.add_option("--runs", runs, "timed runs per product (median reported)")->check(cli::Range(5, 1000));
  app.add_flag("--compare", compare, "also measure OpenBLAS (forced) in the same run");
  app.add_option("--products", shapes, "M x K x N products, e.g. 259x1024x3072 (default: the LSTM's and encoder's)")
      ->delimiter(',');
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);

  return run_example("gemm_bench", [&] {
    std::vector<Product> products;
    for (const std::string& shape : shapes) {
      long long m = 0, k = 0, n = 0;
      char tail = 0;
      if (std::sscanf(shape.c_str(), "%lldx%lldx%lld%c", &m, &k, &n, &tail) != 3 || m <= 0 || k <= 0 || n <= 0)
        throw ValueError("--products wants M x K x N as 259x1024x3072, got '" + shape + "'");
      products.push_back({m, k, n});
    }
    const double peak = core_peak_gflops();
    std::vector<Row> rows = measure(backend, products, threads, runs, peak);
    const std::string used = rows.empty() ? gemm_choice().backend : rows.front().backend;
    const std::string reason = gemm_choice().reason;
    if (compare && used != "openblas") {
      std::vector<Row> openblas = measure("openblas", products, threads, runs, peak);
      rows.insert(rows.end(), openblas.begin(), openblas.end());
    }
    std::vector<Row> packed = measure_packed(products, threads, runs, peak);
    rows.insert(rows.end(), packed.begin(), packed.end());

    if (json) {
      nlohmann::ordered_json out{{"backend", used}, {"peak_gflops_per_core", rounded(peak, 1)},
                                 {"products", nlohmann::json::array()}};
      for (const Row& r : rows)
        out["products"].push_back({{"m", r.product.m}, {"k", r.product.k}, {"n", r.product.n}, {"threads", r.threads},
                               {"gflops", rounded(r.gflops, 1)}, {"peak_frac", rounded(r.peak_frac, 3)},
                               {"backend", r.backend}});
      print_json_line(with_cpu_kernels(out));
      return 0;
    }
    std::printf("gemm backend: %s (%s); %d core(s) of %s; FMA peak %.1f GFLOP/s per core (%s, measured here)\n",
                used.c_str(), reason.c_str(), hardware_cores(), cpu_model_name().c_str(), peak, cpu_isa_name(cpu_isa()));
    std::printf("%-19s %7s %6s %6s %6s %9s %8s\n", "backend", "threads", "M", "K", "N", "GFLOP/s", "of peak");
    for (const Row& r : rows)
      std::printf("%-19s %7d %6ld %6ld %6ld %9.1f %7.1f%%\n", r.backend.c_str(), r.threads,
                  static_cast<long>(r.product.m), static_cast<long>(r.product.k), static_cast<long>(r.product.n),
                  r.gflops, 100 * r.peak_frac);
    return 0;
  });
}
