#include "devices/cpu/gemm.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "devices/cpu/kernel_choices.h"
#include "devices/determinism.h"
#include "devices/error.h"
#include "devices/threads.h"

namespace troupe {

namespace {

void sgemm_onednn(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb,
                                          beta, c, ldc);
  if (status != dnnl_success)
    throw ValueError("gemm_f32: dnnl_sgemm failed with status " + std::to_string(static_cast<int>(status)));
}

// cblas takes 32-bit ints in this OpenBLAS build.
void check_blas_range(const char* op, std::initializer_list<int64_t> values) {
  for (int64_t v : values)
    if (v > INT_MAX) throw ValueError(std::string(op) + ": dimension " + std::to_string(v) + " exceeds OpenBLAS's int range");
}

void sgemm_openblas(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  check_blas_range("gemm_f32", {m, n, k, lda, ldb, ldc});
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// CPU seconds the calling thread spent on one run of the calibration product.
template <class Gemm>
double time_once(Gemm gemm, int64_t m, int64_t n, int64_t k, const std::vector<float>& a, const std::vector<float>& b,
                 std::vector<float>& c) {
  timespec start{}, end{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
  gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &end);
  return double(end.tv_sec - start.tv_sec) + 1e-9 * double(end.tv_nsec - start.tv_nsec);
}

struct Calibration {
  double onednn_gflops = 0, openblas_gflops = 0;
};

// On one thread and in that thread's CPU time, so that the figures compare the kernels rather than
// how busy the (shared) cores are; runs alternate between the libraries.
Calibration calibrate() {
  const int64_t m = 256, n = 1024, k = 1024;
  std::vector<float> a(m * k, 0.5f), b(k * n, 0.25f), c(m * n);
  const int previous = thread_intra_op_threads();
  set_thread_intra_op_threads(1);
  apply_intra_op_threads();
  double onednn_best = 1e30, openblas_best = 1e30;
  for (int run = 0; run < 4; ++run) {  // run 0 warms caches, JIT kernels and thread pools
    const double onednn = time_once(sgemm_onednn, m, n, k, a, b, c);
    const double openblas = time_once(sgemm_openblas, m, n, k, a, b, c);
    if (run == 0) continue;
    onednn_best = std::min(onednn_best, onednn);
    openblas_best = std::min(openblas_best, openblas);
  }
  set_thread_intra_op_threads(previous);
  const double flops = 2.0 * double(m) * double(n) * double(k);
  return {flops / onednn_best / 1e9, flops / openblas_best / 1e9};
}

// oneDNN unless OpenBLAS is clearly faster: oneDNN also wins on the skinny products (small M)
// that the calibration does not measure, and runs on the same OpenMP threads as every other
// kernel, where OpenBLAS's own pool spins beside them (the encoder's bf16 fastpath: 311 ms with
// oneDNN for its attention products, 406 ms with OpenBLAS measured 6% faster alone).
GemmChoice choose(Calibration measured, const char* when) {
  GemmChoice choice;
  choice.onednn_gflops = measured.onednn_gflops;
  choice.openblas_gflops = measured.openblas_gflops;
  choice.backend = choice.openblas_gflops > 1.25 * choice.onednn_gflops ? "openblas" : "onednn";
  char reason[300];
  std::snprintf(reason, sizeof(reason),
                "measured %s 256x1024x1024 on 1 thread: onednn %.1f GFLOP/s, openblas %.1f GFLOP/s (oneDNN unless "
                "OpenBLAS is 1.25x faster)",
                when, choice.onednn_gflops, choice.openblas_gflops);
  choice.reason = reason;
  return choice;
}

// The calibration's figures are kept for later processes (kernel_choices.h): "ONEDNN,OPENBLAS".
GemmChoice calibrated() {
  const std::string key = "gemm/calibration/256x1024x1024";
  if (const std::optional<std::string> known = remembered_choice(key)) {
    Calibration c;
    if (std::sscanf(known->c_str(), "%lf,%lf", &c.onednn_gflops, &c.openblas_gflops) == 2 && c.onednn_gflops > 0 &&
        c.openblas_gflops > 0)
      return choose(c, ("before (kept in " + kernel_choices_file() + ")").c_str());
  }
  const Calibration c = calibrate();
  char value[64];
  std::snprintf(value, sizeof(value), "%.2f,%.2f", c.onednn_gflops, c.openblas_gflops);
  remember_choice(key, value);
  return choose(c, "here");
}

GemmChoice forced(std::string_view backend, std::string reason) {
  if (backend != "onednn" && backend != "openblas")
    throw ValueError("gemm backend: expected onednn, openblas or auto, got '" + std::string(backend) + "'");
  GemmChoice choice;
  choice.backend = std::string(backend);
  choice.reason = std::move(reason);
  return choice;
}

GemmChoice initial_choice() {
  const char* env = std::getenv("TROUPE_GEMM");
  if (env && *env) return forced(env, std::string("TROUPE_GEMM=") + env);
  if (deterministic_kernels()) return forced("onednn", "deterministic kernels: not measured");
  return calibrated();
}

// Every choice ever made stays alive (a deque keeps addresses), so references handed out by
// gemm_choice() never dangle when set_gemm_backend() replaces the current one.
std::mutex choices_mutex;
std::deque<GemmChoice> choices;
std::atomic<const GemmChoice*> current_choice{nullptr};
std::atomic<bool> use_onednn{true};

const GemmChoice& install(GemmChoice choice) {
  std::lock_guard lock(choices_mutex);
  choices.push_back(std::move(choice));
  const GemmChoice* installed = &choices.back();
  use_onednn.store(installed->backend == "onednn", std::memory_order_relaxed);
  current_choice.store(installed, std::memory_order_release);
  return *installed;
}

const GemmChoice& initial() {
  static const GemmChoice& first = install(initial_choice());
  return first;
}

void check_leading_dims(const char* op, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda,
                        int64_t ldb, int64_t ldc) {
  if (m < 0 || n < 0 || k < 0)
    throw ValueError(std::string(op) + ": negative size m=" + std::to_string(m) + " n=" + std::to_string(n) +
                     " k=" + std::to_string(k));
  const int64_t a_cols = trans_a ? m : k, b_cols = trans_b ? k : n;
  if (lda < std::max<int64_t>(1, a_cols) || ldb < std::max<int64_t>(1, b_cols) || ldc < std::max<int64_t>(1, n))
    throw ValueError(std::string(op) + ": leading dimensions lda=" + std::to_string(lda) + " ldb=" +
                     std::to_string(ldb) + " ldc=" + std::to_string(ldc) + " too small for m=" + std::to_string(m) +
                     " n=" + std::to_string(n) + " k=" + std::to_string(k));
}

// Handles the sizes the libraries need not see. Returns true when nothing is left to do.
template <class T>
bool trivial_product(int64_t m, int64_t n, int64_t k, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return true;
  if (k > 0) return false;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
  return true;
}

}  // namespace

const GemmChoice& gemm_choice() {
  const GemmChoice* now = current_choice.load(std::memory_order_acquire);
  return now ? *now : initial();
}

void set_gemm_backend(std::string_view backend) {
  if (backend == "auto") {
    // The calibrated (or TROUPE_GEMM) choice again, measured once per process.
    GemmChoice again = initial();
    install(std::move(again));
    return;
  }
  initial();  // so a later first use does not overwrite this choice
  install(forced(backend, "set_gemm_backend(\"" + std::string(backend) + "\")"));
}

void gemm_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
              const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  check_leading_dims("gemm_f32", trans_a, trans_b, m, n, k, lda, ldb, ldc);
  if (trivial_product(m, n, k, beta, c, ldc)) return;
  gemm_choice();
  apply_intra_op_threads();
  if (use_onednn.load(std::memory_order_relaxed))
    sgemm_onednn(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    sgemm_openblas(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm_f64(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
              int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  check_leading_dims("gemm_f64", trans_a, trans_b, m, n, k, lda, ldb, ldc);
  if (trivial_product(m, n, k, beta, c, ldc)) return;
  check_blas_range("gemm_f64", {m, n, k, lda, ldb, ldc});
  apply_intra_op_threads();
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

}  // namespace troupe
