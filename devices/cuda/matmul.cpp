// matmul, bmm and linear on cuda through cuBLAS (cublasGemmStridedBatchedEx_64).
//
// cuBLAS is column-major; a row-major C = A @ B is the column-major C^T = B^T @ A^T, so the
// operands go in swapped. A row-major matrix read column-major is its transpose, and a transposed
// view (unit row stride) is a column-major matrix: either orientation goes in without a copy, as
// does a batch broadcast (batch stride 0). f32 computes in strict fp32 unless TROUPE_CUDA_TF32=1;
// f16/bf16 accumulate in f32; f64 in f64. The handle is the current stream's (cuda/blas.h).
#include <cublas_v2.h>

#include <cstdlib>

#include "devices/cuda/blas.h"
#include "devices/op_defs/matmul.h"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

bool tf32_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("TROUPE_CUDA_TF32");
    return v && std::string(v) == "1";
  }();
  return enabled;
}

// How cuBLAS reads the matrices of a [batch..., rows, cols] view.
struct Operand {
  Tensor tensor;             // keeps a contiguous copy alive when one was needed
  bool row_major = true;     // else column-major (a transposed view)
  int64_t ld = 0;            // leading dimension
  int64_t batch_stride = 0;  // 0: one matrix for every batch entry
};

bool try_layout(const Tensor& x, Operand& op) {
  const int64_t rows = x.size(-2), cols = x.size(-1);
  const int64_t row_stride = x.strides()[x.dim() - 2], col_stride = x.strides()[x.dim() - 1];
  if (col_stride == 1 || cols == 1) {
    op.row_major = true;
    op.ld = rows == 1 ? std::max<int64_t>(cols, 1) : row_stride;
  } else if (row_stride == 1 || rows == 1) {
    op.row_major = false;
    op.ld = cols == 1 ? std::max<int64_t>(rows, 1) : col_stride;
  } else {
    return false;
  }
  if (op.ld < std::max<int64_t>(op.row_major ? cols : rows, 1)) return false;
  // The batch dims must step through memory with one stride.
  Shape batch(x.shape().begin(), x.shape().end() - 2);
  Strides batch_strides(x.strides().begin(), x.strides().end() - 2);
  int64_t stride = 0, expected_next = -1;
  for (size_t d = batch.size(); d-- > 0;) {
    if (batch[d] == 1) continue;
    if (expected_next < 0) {
      stride = batch_strides[d];
    } else if (batch_strides[d] != expected_next) {
      return false;
    }
    expected_next = batch_strides[d] * batch[d];
  }
  op.batch_stride = stride;
  op.tensor = x;
  return true;
}

Operand operand(const Tensor& x) {
  Operand op;
  if (!try_layout(x, op)) try_layout(x.contiguous(), op);  // contiguous always fits
  return op;
}

cudaDataType data_type(DType t, const char* op) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f64: return CUDA_R_64F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: throw DeviceError(std::string(op) + ": no cuda kernel for " + name(t));
  }
}

// out [batch..., M, N] (contiguous) = a [batch..., M, K] @ b [batch..., K, N], plus out when accumulate.
void gemm(const char* op_name, const Tensor& a_view, const Tensor& b_view, Tensor& out, bool accumulate) {
  const int device = out.device().index;
  const DType dtype = out.dtype();
  const cudaDataType type = data_type(dtype, op_name);
  const int64_t m = a_view.size(-2), k = a_view.size(-1), n = b_view.size(-1);
  if (out.numel() == 0) return;
  int64_t batch = out.numel() / (m * n);
  void* c = out.mutable_raw_data();
  const cudaStream_t stream = current_stream(device);
  if (k == 0) {  // an empty sum: zeros, or out unchanged when accumulating
    if (!accumulate) check(cudaMemsetAsync(c, 0, out.nbytes(), stream), "cudaMemsetAsync", device);
    return;
  }
  const Operand a = operand(a_view), b = operand(b_view);
  int64_t rows = m;
  int64_t a_stride = a.batch_stride;
  // One taller product instead of a batch when every entry multiplies by the same b ([B,T,K] @ [K,N]).
  if (batch > 1 && b.batch_stride == 0 && a.row_major && a.batch_stride == m * a.ld) {
    rows = m * batch;
    batch = 1;
    a_stride = 0;
  }
  const bool is_f64 = dtype == DType::f64;
  const double alpha64 = 1, beta64 = accumulate ? 1 : 0;
  const float alpha32 = 1, beta32 = accumulate ? 1 : 0;
  const cublasComputeType_t compute = is_f64                                  ? CUBLAS_COMPUTE_64F
                                      : dtype == DType::f32 && tf32_enabled() ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                              : CUBLAS_COMPUTE_32F;
  // Column-major: C^T [n x rows] = B^T [n x k] @ A^T [k x rows].
  check_blas(cublasGemmStridedBatchedEx_64(
                   blas_handle(device), b.row_major ? CUBLAS_OP_N : CUBLAS_OP_T, a.row_major ? CUBLAS_OP_N : CUBLAS_OP_T,
                   n, rows, k, is_f64 ? static_cast<const void*>(&alpha64) : &alpha32, b.tensor.raw_data(), type, b.ld,
                   b.batch_stride, a.tensor.raw_data(), type, a.ld, a_stride,
                   is_f64 ? static_cast<const void*>(&beta64) : &beta32, c, type, n, rows * n, batch, compute,
                   CUBLAS_GEMM_DEFAULT),
               "cublasGemmStridedBatchedEx_64", device);
}

Shape batch_of(const Tensor& x) { return Shape(x.shape().begin(), x.shape().end() - 2); }

Shape with_matrix(Shape batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

std::vector<Tensor> matmul_cuda(const OpCall& call) {
  Tensor a = call.inputs[0], b = call.inputs[1];
  const TensorMeta& meta = call.outputs[0];
  if (a.dtype() != meta.dtype || b.dtype() != meta.dtype)
    throw DeviceError("matmul: no cuda kernel for " + a.meta().str() + " @ " + b.meta().str());
  DeviceGuard on(a.device().index);
  const MatmulAttrs attrs = matmul_attrs(call.attrs);
  if (a.dim() >= 2 && attrs.transpose_a) a = a.transpose(-2, -1);
  if (b.dim() >= 2 && attrs.transpose_b) b = b.transpose(-2, -1);
  if (a.dim() == 1) a = a.unsqueeze(0);   // [K] -> [1, K]
  if (b.dim() == 1) b = b.unsqueeze(-1);  // [K] -> [K, 1]
  const Shape batch = broadcast_shapes("matmul", batch_of(a), batch_of(b));
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  a = a.expand(with_matrix(batch, m, k));
  b = b.expand(with_matrix(batch, k, n));
  Tensor out = Tensor::empty(with_matrix(batch, m, n), meta.dtype, a.device());
  gemm("matmul", a, b, out, false);
  return {out.view(meta.shape)};  // drops the dims 1-d operands gained
}

// [B, M, K] @ [B, K, N]: inference has checked the shapes and dtypes.
std::vector<Tensor> bmm_cuda(const OpCall& call) {
  const Tensor &a = call.inputs[0], &b = call.inputs[1];
  const TensorMeta& meta = call.outputs[0];
  DeviceGuard on(a.device().index);
  Tensor out = Tensor::empty(meta.shape, meta.dtype, a.device());
  gemm("bmm", a, b, out, false);
  return {out};
}

// x [..., K] @ weight[N, K]^T + bias[N]: the bias is copied into the output first and the product
// accumulated onto it.
std::vector<Tensor> linear_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& weight = call.inputs[1];
  const TensorMeta& meta = call.outputs[0];
  if (x.dtype() != meta.dtype || weight.dtype() != meta.dtype)
    throw DeviceError("linear: no cuda kernel for " + x.meta().str() + " with weight " + weight.meta().str());
  DeviceGuard on(x.device().index);
  const int64_t k = weight.size(1), n = weight.size(0);
  const Tensor rows = x.reshape({numel(Shape(x.shape().begin(), x.shape().end() - 1)), k});
  Tensor out = Tensor::empty({rows.size(0), n}, meta.dtype, x.device());
  const bool has_bias = call.inputs.size() > 2;
  if (has_bias && out.numel() > 0 &&
      !copy_elements_on_device(call.inputs[2].reshape({1, n}).expand({rows.size(0), n}), out))
    throw DeviceError("linear: cannot broadcast the bias " + call.inputs[2].meta().str());
  gemm("linear", rows, weight.transpose(0, 1), out, has_bias);
  return {out.view(meta.shape)};
}

const OpRegistrar matmul_kernel{"matmul", DeviceType::cuda, matmul_cuda};
const OpRegistrar bmm_kernel{"bmm", DeviceType::cuda, bmm_cuda};
const OpRegistrar linear_kernel{"linear", DeviceType::cuda, linear_cuda};

}  // namespace

}  // namespace troupe::cuda
