// lstm: one layer, one direction, PyTorch's gate order (i, f, g, o) and weight layout.
// Inputs: x [T, B, C], weight_ih [4H, C], weight_hh [4H, H], bias_ih [4H], bias_hh [4H],
// optionally h0 [B, H] and c0 [B, H]. Outputs: output [T, B, H], h_n [B, H], c_n [B, H].
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

std::vector<TensorMeta> infer_lstm(const OpInfer& c) {
  const auto& in = c.inputs;
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i].dtype != DType::f32)
      throw DTypeError("lstm: expects f32 tensors, input " + std::to_string(i) + " is " + in[i].str());
  const TensorMeta &x = in[0], &w_ih = in[1], &w_hh = in[2], &b_ih = in[3], &b_hh = in[4];
  if (x.shape.size() != 3) throw ShapeError("lstm: x must be [T, B, C], got " + x.str());
  const int64_t T = x.shape[0], B = x.shape[1], C = x.shape[2];
  if (w_hh.shape.size() != 2 || w_hh.shape[0] != 4 * w_hh.shape[1])
    throw ShapeError("lstm: weight_hh must be [4H, H], got " + w_hh.str());
  const int64_t H = w_hh.shape[1];
  if (w_ih.shape != Shape{4 * H, C})
    throw ShapeError("lstm: weight_ih must be [4H, C] = " + to_string(Shape{4 * H, C}) + " for x " + x.str() +
                     " and weight_hh " + w_hh.str() + ", got " + w_ih.str());
  if (b_ih.shape != Shape{4 * H} || b_hh.shape != Shape{4 * H})
    throw ShapeError("lstm: biases must be [4H] = [" + std::to_string(4 * H) + "], got " + b_ih.str() + " and " +
                     b_hh.str());
  for (size_t i = 5; i < in.size(); ++i)
    if (in[i].shape != Shape{B, H})
      throw ShapeError(std::string("lstm: ") + (i == 5 ? "h0" : "c0") + " must be [B, H] = " + to_string(Shape{B, H}) +
                       ", got " + in[i].str());
  return {{DType::f32, {T, B, H}, x.device}, {DType::f32, {B, H}, x.device}, {DType::f32, {B, H}, x.device}};
}

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

OpRegistrar lstm_op{OpDef{
    .name = "lstm",
    .doc = "one LSTM layer over x [T,B,C] (PyTorch gate order i,f,g,o); outputs output, h_n, c_n",
    .min_inputs = 5,
    .max_inputs = 7,
    .attrs = {},
    .infer = infer_lstm,
    .kernels = {{DeviceType::cpu, lstm_cpu}}}};

}  // namespace
}  // namespace troupe
