#pragma once
// Single-precision GEMM on the host, through whichever library measured fastest here.
//
//   gemm_f32(false, true, M, N, K, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);   // C = A @ B^T
//   std::cout << gemm_choice().backend;                                      // "onednn"
#include <cstdint>
#include <string>

namespace troupe {

struct GemmChoice {
  std::string backend;       // "onednn" or "openblas"
  std::string reason;        // how it was chosen (measured figures, or TROUPE_GEMM override)
  double onednn_gflops = 0;  // calibration figures (0 when not measured)
  double openblas_gflops = 0;
};

// Chosen once per process on first use: TROUPE_GEMM=onednn|openblas forces it; otherwise a short
// calibration on a mid-sized product picks the faster.
const GemmChoice& gemm_choice();

// Row-major C = alpha * op(A) @ op(B) + beta * C, op = transpose when the flag is set.
void gemm_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
              const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm_f64(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
              int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

}  // namespace troupe
