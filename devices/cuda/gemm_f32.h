#pragma once
// Internal to the CUDA kernels: row-major f32 GEMM on the current stream's cuBLAS handle, in
// full f32 (no TF32), for kernels that chain GEMMs over their own buffers (lstm, its backward).
//
//   // gates [T*B, 4H] = x [T*B, C] @ weight_ih [4H, C]^T
//   gemm_f32(device, false, true, T * B, 4 * H, C, 1.0f, x, C, weight_ih, C, 0.0f, gates, 4 * H);
#include <cstdint>

namespace troupe::cuda {

// C [m, n] = alpha * op(A) @ op(B) + beta * C, all row-major with leading dimensions lda, ldb, ldc;
// op(A) is [m, k] (A^T when trans_a), op(B) is [k, n]. k == 0 scales C by beta (0: zeros).
void gemm_f32(int device, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
              int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace troupe::cuda
