// linear_bf16 on cuda (the CPU op's contract: devices/cpu/matmul.cpp, linear_bf16): x and the
// weight rounded to bf16 (round to nearest even, as the CPU rounds), one cuBLAS GEMM on the tensor
// cores accumulating in f32, then one kernel for bias and activation (gelu in its erf form, as on
// the CPU; cuBLASLt's fused GELU is the tanh form) that writes f32 or bf16. The weight is rounded
// on every call: the kernel has no cache to keep its bf16 copy in.
#include "devices/cuda/blas.h"
#include "devices/cuda/kernel_util.cuh"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

enum class Activation { none, relu, gelu };

Activation activation_of(const std::string& name) {
  if (name == "relu") return Activation::relu;
  if (name == "gelu") return Activation::gelu;
  return Activation::none;  // inference has rejected anything else
}

template <class Out>
__global__ void bias_activation(const float* in, const float* bias, Out* out, int64_t n, int64_t cols,
                                Activation act) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float v = in[i];
    if (bias) v += bias[i % cols];
    if (act == Activation::relu) v = v < 0.0f ? 0.0f : v;
    if (act == Activation::gelu) v = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    out[i] = convert_to<Out>(v);
  }
}

std::vector<Tensor> linear_bf16_cuda(const OpCall& call) {
  const TensorMeta& meta = call.outputs[0];
  const Tensor& x = call.inputs[0];
  const int device = x.device().index;
  DeviceGuard on(device);
  const int64_t k = call.inputs[1].size(1), n = call.inputs[1].size(0);
  const Tensor rows = x.reshape({numel(Shape(x.shape().begin(), x.shape().end() - 1)), k}).to(DType::bf16).contiguous();
  const Tensor weight = call.inputs[1].to(DType::bf16).contiguous();
  const int64_t m = rows.size(0);
  Tensor out = Tensor::empty({m, n}, meta.dtype, x.device());
  if (out.numel() == 0) return {out.view(meta.shape)};
  const cudaStream_t stream = current_stream(device);
  // The f32 products: the output itself when it is f32, else a buffer the epilogue rounds from.
  // (A second handle on out's bytes would make mutable_raw_data() copy them first.)
  Tensor buffer = meta.dtype == DType::f32 ? Tensor() : Tensor::empty({m, n}, DType::f32, x.device());
  float* pp = static_cast<float*>((buffer.defined() ? buffer : out).mutable_raw_data());
  if (k == 0) {
    check(cudaMemsetAsync(pp, 0, sizeof(float) * m * n, stream), "cudaMemsetAsync", device);
  } else {
    const float one = 1.0f, zero = 0.0f;
    // Column-major: products^T [n x m] = weight [n x k] @ rows^T [k x m].
    check_blas(cublasGemmEx_64(blas_handle(device), CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, weight.raw_data(),
                               CUDA_R_16BF, k, rows.raw_data(), CUDA_R_16BF, k, &zero, pp, CUDA_R_32F, n,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx_64", device);
  }
  const Tensor bias = call.inputs.size() > 2 ? call.inputs[2].contiguous() : Tensor();
  const Activation act = activation_of(call.attrs.get<std::string>("activation"));
  if (bias.defined() || act != Activation::none || meta.dtype != DType::f32) {
    const float* pb = bias.defined() ? device_read<float>(bias) : nullptr;
    if (meta.dtype == DType::f32)
      bias_activation<<<blocks_for(out.numel()), kThreads, 0, stream>>>(pp, pb, pp, out.numel(), n, act);
    else
      bias_activation<<<blocks_for(out.numel()), kThreads, 0, stream>>>(
          pp, pb, static_cast<__nv_bfloat16*>(out.mutable_raw_data()), out.numel(), n, act);
    check_launch("linear_bf16", device);
  }
  return {out.view(meta.shape)};
}

const OpRegistrar linear_bf16_kernel{"linear_bf16", DeviceType::cuda, linear_bf16_cuda};

}  // namespace

}  // namespace troupe::cuda
