// lstm_backward on cuda (the op: devices/op_defs/lstm.cpp): the forward recurrence again
// (lstm_steps), keeping every step's activated gates and states, then backwards through time with
// one fused gate-gradient kernel (the maths: devices/op_defs/lstm_cell.h) and one GEMM
// (dh_{t-1} = dgates_t @ W_hh) per step; dx and the weight gradients are three GEMMs over all
// steps at once, the bias gradient a column sum in the CPU's row order.
#include "devices/cuda/gemm_f32.h"
#include "devices/cuda/kernel_util.cuh"
#include "devices/cuda/lstm_steps.h"
#include "devices/op_defs/lstm_cell.h"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

// One thread per (row b, unit j) of step t: the unit's four pre-activation gate gradients, and dc
// carried to step t-1 (in place).
__global__ void lstm_cell_backward(const float* acts, const float* c_prev, const float* c_t, const float* grad_out,
                                   const float* dh, float* dc, float* dgates, int64_t batch, int64_t hidden) {
  const int64_t n = batch * hidden, g4 = 4 * hidden;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = k / hidden, j = k % hidden;
    dc[k] = lstm_unit_backward(acts + b * g4, c_prev[k], tanhf(c_t[k]), dh[k], grad_out[k], dc[k], hidden, j,
                               dgates + b * g4);
  }
}

// sums[j] = sum over rows r in order of m[r, j]: one thread per column, so the order (and the
// result) is the CPU loop's.
__global__ void column_sums(const float* m, int64_t rows, int64_t cols, float* sums) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < cols; j += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int64_t r = 0; r < rows; ++r) s += m[r * cols + j];
    sums[j] = s;
  }
}

std::vector<Tensor> lstm_backward_cuda(const OpCall& call) {
  std::vector<Tensor> in;
  for (const Tensor& t : call.inputs) in.push_back(t.contiguous());
  const Tensor &x = in[0], &w_ih = in[1], &w_hh = in[2];
  const int64_t T = x.size(0), B = x.size(1), C = x.size(2), H = w_hh.size(1), G = 4 * H, BH = B * H;
  const Device on_device = x.device();
  const int device = on_device.index;
  DeviceGuard on(device);
  const cudaStream_t stream = current_stream(device);
  auto copy = [&](float* dst, const Tensor& src, int64_t count) {
    if (count > 0)
      check(cudaMemcpyAsync(dst, device_read<float>(src), sizeof(float) * count, cudaMemcpyDeviceToDevice, stream),
            "cudaMemcpyAsync", device);
  };

  // Forward again: acts[t] the activated gates (i, f, g, o); hs[t], cs[t] the states before step t.
  Tensor acts = Tensor::empty({T * B, G}, DType::f32, on_device);
  Tensor hs = Tensor::empty({T + 1, B, H}, DType::f32, on_device);
  Tensor cs = Tensor::empty({T + 1, B, H}, DType::f32, on_device);
  float* pa = device_write<float>(acts);
  float* ph = device_write<float>(hs);
  float* pc = device_write<float>(cs);
  copy(ph, in[5], BH);
  copy(pc, in[6], BH);
  gemm_f32(device, false, true, T * B, G, C, 1.0f, device_read<float>(x), C, device_read<float>(w_ih), C, 0.0f, pa, G);
  lstm_steps(device, {T, B, H}, pa, device_read<float>(w_hh), device_read<float>(in[3]), device_read<float>(in[4]), ph, ph + BH, pc,
             pc + BH, BH, true);

  // Backwards through time: dgates[t] = d loss / d (pre-activation gates of step t).
  Tensor dgates = Tensor::empty({T * B, G}, DType::f32, on_device);
  Tensor dh0 = Tensor::empty({B, H}, DType::f32, on_device), dc0 = Tensor::empty({B, H}, DType::f32, on_device);
  float* pd = device_write<float>(dgates);
  float* dh = device_write<float>(dh0);
  float* dc = device_write<float>(dc0);
  copy(dh, in[8], BH);
  copy(dc, in[9], BH);
  const float* grad_out = device_read<float>(in[7]);
  for (int64_t t = T - 1; t >= 0 && BH > 0; --t) {
    lstm_cell_backward<<<blocks_for(BH), kThreads, 0, stream>>>(pa + t * B * G, pc + t * BH, pc + (t + 1) * BH,
                                                                grad_out + t * BH, dh, dc, pd + t * B * G, B, H);
    check_launch("lstm_backward", device);
    gemm_f32(device, false, false, B, H, G, 1.0f, pd + t * B * G, G, device_read<float>(w_hh), H, 0.0f, dh, H);
  }

  Tensor dx = Tensor::empty({T, B, C}, DType::f32, on_device);
  Tensor dw_ih = Tensor::empty({G, C}, DType::f32, on_device), dw_hh = Tensor::empty({G, H}, DType::f32, on_device);
  Tensor db_ih = Tensor::empty({G}, DType::f32, on_device), db_hh = Tensor::empty({G}, DType::f32, on_device);
  gemm_f32(device, false, false, T * B, C, G, 1.0f, pd, G, device_read<float>(w_ih), C, 0.0f, device_write<float>(dx), C);
  gemm_f32(device, true, false, G, C, T * B, 1.0f, pd, G, device_read<float>(x), C, 0.0f, device_write<float>(dw_ih), C);
  gemm_f32(device, true, false, G, H, T * B, 1.0f, pd, G, ph, H, 0.0f, device_write<float>(dw_hh), H);
  if (G > 0) {
    float* pb = device_write<float>(db_ih);
    column_sums<<<blocks_for(G), kThreads, 0, stream>>>(pd, T * B, G, pb);
    check_launch("lstm_backward", device);
    check(cudaMemcpyAsync(device_write<float>(db_hh), pb, sizeof(float) * G, cudaMemcpyDeviceToDevice, stream),
          "cudaMemcpyAsync", device);
  }
  return {dx, dw_ih, dw_hh, db_ih, db_hh, dh0, dc0};
}

const OpRegistrar lstm_backward_kernel{"lstm_backward", DeviceType::cuda, lstm_backward_cuda};

}  // namespace

}  // namespace troupe::cuda
