// gemm_bench: single-precision GEMM rates through troupe::matmul (the path the models use) for the
// products the models run, on 1 and 2 intra-op threads, against the core's peak.
//
//   gemm_bench                       # table, calibrated backend
//   gemm_bench --compare             # the chosen backend and OpenBLAS side by side
//   gemm_bench --json --threads 1,2  # one JSON line for notes and scripts
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "devices/cpu/gemm.h"
#include "devices/ops.h"
#include "devices/threads.h"
#include "examples/json_line.h"
#include "examples/run_example.h"

using namespace troupe;

namespace {

constexpr double kPeakGflopsPerCore = 227.0;  // AVX-512 FMA peak of one core of the reference machine

struct Product {
  int64_t m, k, n;
};

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
                         const std::vector<int>& threads, int runs) {
  set_gemm_backend(backend);
  std::vector<Row> rows;
  for (const Product& p : products) {
    const Tensor a = Tensor::full({p.m, p.k}, 0.5);
    const Tensor b = Tensor::full({p.k, p.n}, 0.25);
    for (int t : threads) {
      set_intra_op_threads(t);
      const double gflops = 2.0 * double(p.m) * double(p.k) * double(p.n) / median_seconds(a, b, runs) / 1e9;
      rows.push_back({gemm_choice().backend, p, t, gflops, gflops / (kPeakGflopsPerCore * t)});
    }
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GEMM rates through troupe::matmul"};
  bool json = false, compare = false;
  std::string backend = "auto";
  std::vector<int> threads{1, 2};
  int runs = 5;
  app.add_flag("--json", json, "print one JSON line instead of a table");
  app.add_option("--backend", backend, "GEMM library: onednn, openblas or auto (calibrated)")
      ->check(CLI::IsMember({"onednn", "openblas", "auto"}));
  app.add_option("--threads", threads, "intra-op thread counts, e.g. 1,2")->delimiter(',')->check(CLI::PositiveNumber);
  app.add_option("--runs", runs, "timed runs per product (median reported)")->check(CLI::Range(5, 1000));
  app.add_flag("--compare", compare, "also measure OpenBLAS (forced) in the same run");
  CLI11_PARSE(app, argc, argv);

  return run_example("gemm_bench", [&] {
    const std::vector<Product> products{{2500, 1024, 4096}, {50, 1024, 4096}, {259, 1024, 4096}};
    std::vector<Row> rows = measure(backend, products, threads, runs);
    const std::string used = rows.empty() ? gemm_choice().backend : rows.front().backend;
    const std::string reason = gemm_choice().reason;
    if (compare && used != "openblas") {
      std::vector<Row> openblas = measure("openblas", products, threads, runs);
      rows.insert(rows.end(), openblas.begin(), openblas.end());
    }

    if (json) {
      nlohmann::json out{{"backend", used}, {"gemm", nlohmann::json::array()}};
      for (const Row& r : rows)
        out["gemm"].push_back({{"m", r.product.m}, {"k", r.product.k}, {"n", r.product.n}, {"threads", r.threads},
                               {"gflops", rounded(r.gflops, 1)}, {"peak_frac", rounded(r.peak_frac, 3)},
                               {"backend", r.backend}});
      print_json_line(out);
      return 0;
    }
    std::printf("gemm backend: %s (%s); %d core(s); peak %.0f GFLOP/s per thread\n", used.c_str(), reason.c_str(),
                hardware_cores(), kPeakGflopsPerCore);
    std::printf("%-9s %7s %6s %6s %6s %9s %8s\n", "backend", "threads", "M", "K", "N", "GFLOP/s", "of peak");
    for (const Row& r : rows)
      std::printf("%-9s %7d %6ld %6ld %6ld %9.1f %7.1f%%\n", r.backend.c_str(), r.threads,
                  static_cast<long>(r.product.m), static_cast<long>(r.product.k), static_cast<long>(r.product.n),
                  r.gflops, 100 * r.peak_frac);
    return 0;
  });
}
