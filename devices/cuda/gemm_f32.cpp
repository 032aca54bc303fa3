// Row-major f32 GEMM through cuBLAS's column-major interface: C = A B is C^T = B^T A^T, so the
// operands swap places and keep their transposes and leading dimensions.
#include "devices/cuda/gemm_f32.h"

#include "devices/cuda/blas.h"

namespace troupe::cuda {

void gemm_f32(int device, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
              int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  cublasHandle_t handle = blas_handle(device);
  if (k == 0) {  // an empty sum: C = beta * C, done here rather than trusting the library's early return
    if (beta == 0.0f) {
      check(cudaMemset2DAsync(c, sizeof(float) * ldc, 0, sizeof(float) * n, m, current_stream(device)),
            "cudaMemset2DAsync", device);
    } else if (beta != 1.0f) {
      const float zero = 0.0f;
      check_blas(cublasSgeam_64(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, &beta, c, ldc, &zero, c, ldc, c, ldc),
                 "cublasSgeam_64", device);
    }
    return;
  }
  check_blas(cublasGemmEx_64(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m,
                             k, &alpha, b, CUDA_R_32F, ldb, a, CUDA_R_32F, lda, &beta, c, CUDA_R_32F, ldc,
                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
             "cublasGemmEx_64", device);
}

}  // namespace troupe::cuda
