#pragma once
// Single-precision GEMM on the host, through whichever library measured fastest here.
//
//   gemm_f32(false, true, M, N, K, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);   // C = A @ B^T
//   std::cout << gemm_choice().backend;                                      // "onednn"
#include <cstdint>
#include <string>
#include <string_view>

namespace troupe {

struct GemmChoice {
  std::string backend;       // "onednn" or "openblas"
  std::string reason;        // how it was chosen (measured figures, or TROUPE_GEMM override)
  double onednn_gflops = 0;  // calibration figures (0 when not measured)
  double openblas_gflops = 0;
};

// Chosen once per process on first use: TROUPE_GEMM=onednn|openblas forces it; deterministic
// kernels (determinism.h) take oneDNN; otherwise a short calibration on a mid-sized product picks
// the faster, measured once on this machine and then remembered (kernel_choices.h).
const GemmChoice& gemm_choice();
// Replaces the choice for the rest of the process: "onednn", "openblas", or "auto" (back to the
// calibrated or TROUPE_GEMM choice). ValueError for other names. Benchmarks use it to compare.
void set_gemm_backend(std::string_view backend);

// Row-major C = alpha * op(A) @ op(B) + beta * C, op = transpose when the flag is set.
// Zero-size dims are fine (k == 0 leaves C = beta * C). ValueError for bad leading dimensions.
void gemm_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
              const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm_f64(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
              int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

}  // namespace troupe
