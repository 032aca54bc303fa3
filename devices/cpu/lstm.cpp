// lstm on the CPU (the op: devices/op_defs/lstm.cpp).
//
// The input projection of all T steps is one GEMM (M = T*B); each step then adds h @ W_hh^T
// into its slice of that projection (a GEMM with beta = 1) and applies bias and gates in one pass
// over each row while it is in cache. Both weights are packed once (devices/cpu/gemm_packed.h)
// and reused across steps and calls: re-packing the 16 MB W_hh for each 50-row step halved the
// recurrence's speed.
#include <algorithm>
#include <cstring>
#include <vector>

#include "devices/cpu/activations.h"
#include "devices/cpu/gemm_packed.h"
#include "devices/registry.h"
#include "devices/threads.h"

namespace troupe {
namespace {

std::vector<Tensor> lstm_cpu(const OpCall& call) {
  const Tensor x = call.inputs[0].contiguous();
  const auto w_ih = packed_weight(call.inputs[1]), w_hh = packed_weight(call.inputs[2]);
  const Tensor b_ih = call.inputs[3].contiguous(), b_hh = call.inputs[4].contiguous();
  const int64_t T = x.size(0), B = x.size(1), C = x.size(2), H = w_hh->k(), G = 4 * H;

  Tensor output = Tensor::empty({T, B, H});
  Tensor h_n = Tensor::empty({B, H}), c_n = Tensor::empty({B, H});
  float* out = output.mutable_data<float>();
  float* c = c_n.mutable_data<float>();
  // A host tensor, not a vector: its block comes back from the host allocator's cache each call.
  Tensor h0_buffer = Tensor::zeros({B, H});
  float* h0 = h0_buffer.mutable_data<float>();
  if (call.inputs.size() > 5) copy_elements(call.inputs[5], DType::f32, h0);
  if (call.inputs.size() > 6)
    copy_elements(call.inputs[6], DType::f32, c);
  else
    std::memset(c, 0, sizeof(float) * B * H);
  std::vector<float> bias(static_cast<size_t>(G));
  for (int64_t j = 0; j < G; ++j) bias[j] = b_ih.data<float>()[j] + b_hh.data<float>()[j];

  // gates[t] = x[t] @ W_ih^T for every step at once (a host tensor: huge pages for the big buffer).
  Tensor gates_buffer = Tensor::empty({T * B, G});
  float* gates = gates_buffer.mutable_data<float>();
  gemm_packed_f32(T * B, x.data<float>(), C, *w_ih, 0.0f, gates, G);

  for (int64_t t = 0; t < T; ++t) {
    float* g = gates + t * B * G;
    const float* h_prev = t == 0 ? h0 : out + (t - 1) * B * H;
    gemm_packed_f32(B, h_prev, H, *w_hh, 1.0f, g, G);
    // i, f and o through the sigmoid, g through tanh, in place; the four blocks are contiguous per
    // row. Rows split between the threads the GEMM had (a few percent of a 2-thread direction).
    const int threads = static_cast<int>(std::min<int64_t>(intra_op_threads(), B));
#pragma omp parallel for num_threads(threads) if (threads > 1 && B * H >= 16384)
    for (int64_t b = 0; b < B; ++b) {
      float* a = g + b * G;
      for (int64_t j = 0; j < G; ++j) a[j] += bias[j];
      sigmoid_f32(a, a, 2 * H);
      tanh_f32(a + 2 * H, a + 2 * H, H);
      sigmoid_f32(a + 3 * H, a + 3 * H, H);
      float* cb = c + b * H;
      float* hb = out + t * B * H + b * H;
      for (int64_t j = 0; j < H; ++j) cb[j] = a[H + j] * cb[j] + a[j] * a[2 * H + j];
      tanh_f32(cb, hb, H);
      for (int64_t j = 0; j < H; ++j) hb[j] *= a[3 * H + j];
    }
  }
  const float* last = T == 0 ? h0 : out + (T - 1) * B * H;
  std::memcpy(h_n.mutable_data<float>(), last, sizeof(float) * B * H);
  return {output, h_n, c_n};
}

const OpRegistrar lstm_kernel{"lstm", DeviceType::cpu, lstm_cpu};

}  // namespace
}  // namespace troupe
