// lstm: one layer, one direction, PyTorch's gate order (i, f, g, o) and weight layout.
// Inputs: x [T, B, C], weight_ih [4H, C], weight_hh [4H, H], bias_ih [4H], bias_hh [4H],
// optionally h0 [B, H] and c0 [B, H]. Outputs: output [T, B, H], h_n [B, H], c_n [B, H].
//
// lstm_backward: backpropagation through time for lstm.
// Inputs: x [T,B,C], weight_ih [4H,C], weight_hh [4H,H], bias_ih [4H], bias_hh [4H], h0 [B,H],
// c0 [B,H], and the gradients of output [T,B,H], h_n [B,H], c_n [B,H].
// Outputs: the gradients of x, weight_ih, weight_hh, bias_ih, bias_hh, h0, c0.
//
// Kernels: devices/cpu/lstm.cpp, devices/cpu/lstm_backward.cpp, devices/cuda/lstm.cu,
// devices/cuda/lstm_backward.cu.
#include <string>
#include <vector>

#include "devices/registry.h"

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

const OpRegistrar lstm_op{OpDef{
    .name = "lstm",
    .doc = "one LSTM layer over x [T,B,C] (PyTorch gate order i,f,g,o); outputs output, h_n, c_n",
    .min_inputs = 5,
    .max_inputs = 7,
    .attrs = {},
    .infer = infer_lstm}};

std::vector<TensorMeta> infer_lstm_backward(const OpInfer& c) {
  const auto& in = c.inputs;
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i].dtype != DType::f32)
      throw DTypeError("lstm_backward: expects f32 tensors, input " + std::to_string(i) + " is " + in[i].str());
  const TensorMeta &x = in[0], &w_hh = in[2];
  if (x.shape.size() != 3) throw ShapeError("lstm_backward: x must be [T, B, C], got " + x.str());
  if (w_hh.shape.size() != 2 || w_hh.shape[0] != 4 * w_hh.shape[1])
    throw ShapeError("lstm_backward: weight_hh must be [4H, H], got " + w_hh.str());
  const int64_t T = x.shape[0], B = x.shape[1], C = x.shape[2], H = w_hh.shape[1];
  const std::pair<size_t, Shape> expected[] = {{1, {4 * H, C}}, {3, {4 * H}}, {4, {4 * H}}, {5, {B, H}},
                                               {6, {B, H}},     {7, {T, B, H}}, {8, {B, H}}, {9, {B, H}}};
  const char* names[] = {"x", "weight_ih", "weight_hh", "bias_ih", "bias_hh", "h0", "c0",
                         "grad_output", "grad_h_n", "grad_c_n"};
  for (auto& [i, shape] : expected)
    if (in[i].shape != shape)
      throw ShapeError(std::string("lstm_backward: ") + names[i] + " must be " + to_string(shape) + " for x " +
                       x.str() + " and weight_hh " + w_hh.str() + ", got " + in[i].str());
  std::vector<TensorMeta> out(in.begin(), in.begin() + 7);
  return out;
}

const OpRegistrar lstm_backward_op{OpDef{
    .name = "lstm_backward",
    .doc = "gradients of lstm (x, weights, biases, h0, c0) from those of (output, h_n, c_n), recomputing the gates",
    .min_inputs = 10,
    .max_inputs = 10,
    .attrs = {},
    .infer = infer_lstm_backward,
    .not_differentiable = kGradientKernel}};

}  // namespace
}  // namespace troupe
