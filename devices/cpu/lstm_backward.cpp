// lstm_backward on the CPU (the op: devices/op_defs/lstm.cpp). The forward saves nothing beyond
// its inputs, so this kernel runs the recurrence again, keeping every step's gates and cell state,
// then walks the steps backwards (the cell's maths: devices/op_defs/lstm_cell.h).
//
// Per step the only serial work is dh_{t-1} = dgates_t @ W_hh; the weight gradients and dx are
// three large GEMMs over all steps at once.
#include <cstring>
#include <vector>

#include "devices/cpu/activations.h"
#include "devices/cpu/gemm.h"
#include "devices/op_defs/lstm_cell.h"
#include "devices/registry.h"

namespace troupe {
namespace {

std::vector<Tensor> lstm_backward_cpu(const OpCall& call) {
  std::vector<Tensor> in;
  for (const Tensor& t : call.inputs) in.push_back(t.contiguous());
  const Tensor &x = in[0], &w_ih = in[1], &w_hh = in[2];
  const int64_t T = x.size(0), B = x.size(1), C = x.size(2), H = w_hh.size(1), G = 4 * H;
  const float* px = x.data<float>();
  const float* pw_ih = w_ih.data<float>();
  const float* pw_hh = w_hh.data<float>();

  // Forward again: acts[t] holds the activated gates (i, f, g, o); hs[t] and cs[t] the states
  // before step t (hs[0] = h0, cs[0] = c0).
  std::vector<float> acts(static_cast<size_t>(T * B * G));
  std::vector<float> hs(static_cast<size_t>((T + 1) * B * H)), cs(static_cast<size_t>((T + 1) * B * H));
  std::memcpy(hs.data(), in[5].data<float>(), sizeof(float) * B * H);
  std::memcpy(cs.data(), in[6].data<float>(), sizeof(float) * B * H);
  std::vector<float> bias(static_cast<size_t>(G));
  for (int64_t j = 0; j < G; ++j) bias[j] = in[3].data<float>()[j] + in[4].data<float>()[j];
  gemm_f32(false, true, T * B, G, C, 1.0f, px, C, pw_ih, C, 0.0f, acts.data(), G);
  for (int64_t t = 0; t < T; ++t) {
    float* a_t = acts.data() + t * B * G;
    gemm_f32(false, true, B, G, H, 1.0f, hs.data() + t * B * H, H, pw_hh, H, 1.0f, a_t, G);
    for (int64_t b = 0; b < B; ++b) {
      float* a = a_t + b * G;
      for (int64_t j = 0; j < G; ++j) a[j] += bias[j];
      sigmoid_f32(a, a, 2 * H);
      tanh_f32(a + 2 * H, a + 2 * H, H);
      sigmoid_f32(a + 3 * H, a + 3 * H, H);
      const float* c_prev = cs.data() + (t * B + b) * H;
      float* c_next = cs.data() + ((t + 1) * B + b) * H;
      float* h_next = hs.data() + ((t + 1) * B + b) * H;
      for (int64_t j = 0; j < H; ++j) c_next[j] = a[H + j] * c_prev[j] + a[j] * a[2 * H + j];
      tanh_f32(c_next, h_next, H);
      for (int64_t j = 0; j < H; ++j) h_next[j] *= a[3 * H + j];
    }
  }

  // Backwards through time: dgates[t] = d loss / d (pre-activation gates of step t).
  std::vector<float> dgates(static_cast<size_t>(T * B * G));
  std::vector<float> dh(static_cast<size_t>(B * H)), dc(static_cast<size_t>(B * H)), tanh_c(static_cast<size_t>(H));
  std::memcpy(dh.data(), in[8].data<float>(), sizeof(float) * B * H);
  std::memcpy(dc.data(), in[9].data<float>(), sizeof(float) * B * H);
  const float* grad_out = in[7].data<float>();
  for (int64_t t = T - 1; t >= 0; --t) {
    for (int64_t b = 0; b < B; ++b) {
      const float* a = acts.data() + (t * B + b) * G;
      const float* c_prev = cs.data() + (t * B + b) * H;
      const float* c_t = cs.data() + ((t + 1) * B + b) * H;
      float* dga = dgates.data() + (t * B + b) * G;
      float* dhb = dh.data() + b * H;
      float* dcb = dc.data() + b * H;
      const float* go = grad_out + (t * B + b) * H;
      tanh_f32(c_t, tanh_c.data(), H);
      for (int64_t j = 0; j < H; ++j)
        dcb[j] = lstm_unit_backward(a, c_prev[j], tanh_c[j], dhb[j], go[j], dcb[j], H, j, dga);
    }
    // dh_{t-1} = dgates[t] @ W_hh
    gemm_f32(false, false, B, H, G, 1.0f, dgates.data() + t * B * G, G, pw_hh, H, 0.0f, dh.data(), H);
  }

  Tensor dx = Tensor::empty({T, B, C}), dw_ih = Tensor::empty({G, C}), dw_hh = Tensor::empty({G, H});
  Tensor db_ih = Tensor::empty({G}), db_hh = Tensor::empty({G}), dh0 = Tensor::empty({B, H}), dc0 = Tensor::empty({B, H});
  gemm_f32(false, false, T * B, C, G, 1.0f, dgates.data(), G, pw_ih, C, 0.0f, dx.mutable_data<float>(), C);
  gemm_f32(true, false, G, C, T * B, 1.0f, dgates.data(), G, px, C, 0.0f, dw_ih.mutable_data<float>(), C);
  gemm_f32(true, false, G, H, T * B, 1.0f, dgates.data(), G, hs.data(), H, 0.0f, dw_hh.mutable_data<float>(), H);
  float* pb = db_ih.mutable_data<float>();
  std::fill(pb, pb + G, 0.0f);
  for (int64_t r = 0; r < T * B; ++r)
    for (int64_t j = 0; j < G; ++j) pb[j] += dgates[r * G + j];
  std::memcpy(db_hh.mutable_data<float>(), pb, sizeof(float) * G);
  std::memcpy(dh0.mutable_data<float>(), dh.data(), sizeof(float) * B * H);
  std::memcpy(dc0.mutable_data<float>(), dc.data(), sizeof(float) * B * H);
  return {dx, dw_ih, dw_hh, db_ih, db_hh, dh0, dc0};
}

const OpRegistrar lstm_backward_kernel{"lstm_backward", DeviceType::cpu, lstm_backward_cpu};

}  // namespace
}  // namespace troupe
