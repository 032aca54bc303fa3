#pragma once
// Fast single-precision activations on contiguous buffers, the ones the elementwise, softmax and
// LSTM kernels use. Branch-free polynomial and range-reduction code the compiler vectorises
// (libm's expf does not vectorise without -ffast-math); about 1e-7 relative error (gelu 5e-7),
// with IEEE behaviour at the edges: exp overflows to inf and underflows through subnormals to 0,
// NaN stays NaN. y may be x (in place) or a buffer that does not overlap it.
//
//   std::vector<float> gates(4 * hidden);
//   sigmoid_f32(gates.data(), gates.data(), 3 * hidden);                       // i, f, o gates
//   tanh_f32(gates.data() + 3 * hidden, gates.data() + 3 * hidden, hidden);   // cell candidate
#include <cstdint>

namespace troupe {

void exp_f32(const float* x, float* y, int64_t n);
void exp_shifted_f32(const float* x, float* y, int64_t n, float shift, float scale);  // exp((x - shift) * scale)
void tanh_f32(const float* x, float* y, int64_t n);
void sigmoid_f32(const float* x, float* y, int64_t n);            // 1 / (1 + exp(-x))
void gelu_f32(const float* x, float* y, int64_t n);               // x * Phi(x), the erf form
void gelu_tanh_f32(const float* x, float* y, int64_t n);          // tanh approximation

}  // namespace troupe
