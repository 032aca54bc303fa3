#pragma once
// The LSTM cell's backward maths, written once for the CPU (devices/cpu/lstm_backward.cpp) and
// cuda (devices/cuda/lstm_backward.cu) kernels of lstm_backward, so both round alike.
#include <cstdint>

#include "devices/op_defs/host_device.h"

namespace troupe {

// Unit j of one row at step t: from the row's activated gates acts = [i | f | g | o] (4 * hidden
// floats), the cell state before the step, tanh of the cell state after it, and the gradients
// reaching h_t (dh, from step t+1, plus grad_out, from the output) and c_t (dc), writes the four
// pre-activation gate gradients at dgates[j], dgates[hidden + j], ... and returns dc for step t-1.
TROUPE_HOST_DEVICE inline float lstm_unit_backward(const float* acts, float c_prev, float tanh_c, float dh,
                                                   float grad_out, float dc, int64_t hidden, int64_t j,
                                                   float* dgates) {
  const float i = acts[j], f = acts[hidden + j], g = acts[2 * hidden + j], o = acts[3 * hidden + j];
  const float dh_j = dh + grad_out;
  const float dc_j = dc + dh_j * o * (1.0f - tanh_c * tanh_c);
  dgates[j] = dc_j * g * i * (1.0f - i);
  dgates[hidden + j] = dc_j * c_prev * f * (1.0f - f);
  dgates[2 * hidden + j] = dc_j * i * (1.0f - g * g);
  dgates[3 * hidden + j] = dh_j * tanh_c * o * (1.0f - o);
  return dc_j * f;
}

}  // namespace troupe
