#pragma once
// Internal to the CUDA lstm kernels: the forward recurrence, shared by lstm (which keeps only the
// last cell state) and lstm_backward (which runs it again and keeps every step's gates and states,
// as the CPU backward does).
//
//   // gates [T*B, 4H] = x @ weight_ih^T already; h [T, B, H] out; c [B, H]: c0 in, c_n out
//   lstm_steps(device, {T, B, H}, gates, w_hh, b_ih, b_hh, h0, h, c, c, /*c_step=*/0, false);
#include <cstdint>

namespace troupe::cuda {

struct LstmSize {
  int64_t steps, batch, hidden;
};

// Step t adds h_{t-1} @ w_hh^T [4H, H] into gates[t] (one GEMM), then one fused kernel adds
// b_ih + b_hh, applies the gates (i, f, o sigmoid, g tanh) and writes c_t and h_t.
// h_{-1} = h0, h_t at h + t*B*H; c_{-1} = c0, c_t at c + t*c_step (c_step 0: updated in place, c0
// may be c). keep_activations: the activated gates replace gates[t] (for the backward).
void lstm_steps(int device, LstmSize size, float* gates, const float* w_hh, const float* b_ih, const float* b_hh,
                const float* h0, float* h, const float* c0, float* c, int64_t c_step, bool keep_activations);

}  // namespace troupe::cuda
