// lstm on cuda (the CPU op's contract: devices/cpu/lstm.cpp; one layer, one direction, gate order
// i, f, g, o). The input projection of all T steps is one GEMM; each step is one recurrent GEMM
// accumulating into its slice of that projection and one fused kernel for bias, gates, cell and
// hidden state. Like the CPU kernel it saves nothing: lstm_backward recomputes the gates.
#include "devices/cuda/gemm_f32.h"
#include "devices/cuda/kernel_util.cuh"
#include "devices/cuda/lstm_steps.h"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// One thread per (row b, unit j): it alone reads and writes the unit's four gates and its cell.
__global__ void lstm_cell(float* gates, const float* b_ih, const float* b_hh, const float* c_prev, float* c_next,
                          float* h_next, int64_t batch, int64_t hidden, bool keep_activations) {
  const int64_t n = batch * hidden, g4 = 4 * hidden;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = k / hidden, j = k % hidden;
    float* a = gates + b * g4;
    // The biases summed first, as the CPU kernel does.
    const float i = sigmoid(a[j] + (b_ih[j] + b_hh[j]));
    const float f = sigmoid(a[hidden + j] + (b_ih[hidden + j] + b_hh[hidden + j]));
    const float g = tanhf(a[2 * hidden + j] + (b_ih[2 * hidden + j] + b_hh[2 * hidden + j]));
    const float o = sigmoid(a[3 * hidden + j] + (b_ih[3 * hidden + j] + b_hh[3 * hidden + j]));
    const float c = f * c_prev[k] + i * g;
    c_next[k] = c;
    h_next[k] = tanhf(c) * o;
    if (keep_activations) {
      a[j] = i;
      a[hidden + j] = f;
      a[2 * hidden + j] = g;
      a[3 * hidden + j] = o;
    }
  }
}

// Zeros without a trip through the host (Tensor::zeros fills on the host, then copies).
Tensor device_zeros(const Shape& shape, Device device) {
  Tensor t = Tensor::empty(shape, DType::f32, device);
  if (t.numel() > 0)
    check(cudaMemsetAsync(t.mutable_raw_data(), 0, t.nbytes(), current_stream(device.index)), "cudaMemsetAsync",
          device.index);
  return t;
}

std::vector<Tensor> lstm_cuda(const OpCall& call) {
  const Tensor x = call.inputs[0].contiguous(), w_ih = call.inputs[1].contiguous(), w_hh = call.inputs[2].contiguous();
  const Tensor b_ih = call.inputs[3].contiguous(), b_hh = call.inputs[4].contiguous();
  const int64_t T = x.size(0), B = x.size(1), C = x.size(2), H = w_hh.size(1), G = 4 * H;
  const int device = x.device().index;
  DeviceGuard on(device);
  const cudaStream_t stream = current_stream(device);
  Tensor output = Tensor::empty({T, B, H}, DType::f32, x.device());
  Tensor h_n = Tensor::empty({B, H}, DType::f32, x.device());
  Tensor c_n = call.inputs.size() > 6 ? call.inputs[6].clone() : device_zeros({B, H}, x.device());
  const Tensor h0 = call.inputs.size() > 5 ? call.inputs[5].contiguous() : device_zeros({B, H}, x.device());
  if (B * H == 0) return {output, h_n, c_n};

  Tensor gates = Tensor::empty({T * B, G}, DType::f32, x.device());
  float* pg = device_write<float>(gates);
  gemm_f32(device, false, true, T * B, G, C, 1.0f, device_read<float>(x), C, device_read<float>(w_ih), C, 0.0f, pg, G);
  float* out = device_write<float>(output);
  float* c = device_write<float>(c_n);
  lstm_steps(device, {T, B, H}, pg, device_read<float>(w_hh), device_read<float>(b_ih), device_read<float>(b_hh), device_read<float>(h0), out,
             c, c, 0, false);
  const float* last = T == 0 ? device_read<float>(h0) : out + (T - 1) * B * H;
  check(cudaMemcpyAsync(device_write<float>(h_n), last, sizeof(float) * B * H, cudaMemcpyDeviceToDevice, stream),
        "cudaMemcpyAsync", device);
  return {output, h_n, c_n};
}

const OpRegistrar lstm_kernel{"lstm", DeviceType::cuda, lstm_cuda};

}  // namespace

void lstm_steps(int device, LstmSize size, float* gates, const float* w_hh, const float* b_ih, const float* b_hh,
                const float* h0, float* h, const float* c0, float* c, int64_t c_step, bool keep_activations) {
  const int64_t B = size.batch, H = size.hidden, G = 4 * H, n = B * H;
  if (n == 0) return;
  const cudaStream_t stream = current_stream(device);
  for (int64_t t = 0; t < size.steps; ++t) {
    float* g = gates + t * B * G;
    const float* h_prev = t == 0 ? h0 : h + (t - 1) * n;
    const float* c_prev = t == 0 ? c0 : c + (t - 1) * c_step;
    gemm_f32(device, false, true, B, G, H, 1.0f, h_prev, H, w_hh, H, 1.0f, g, G);
    lstm_cell<<<blocks_for(n), kThreads, 0, stream>>>(g, b_ih, b_hh, c_prev, c + t * c_step, h + t * n, B, H,
                                                      keep_activations);
    check_launch("lstm", device);
  }
}

}  // namespace troupe::cuda
