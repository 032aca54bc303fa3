#pragma once
// The typed C++ front of the op registry: each function runs the registered op of the same
// name on the inputs' device. Errors name the op, shapes and dtypes.
//
//   Tensor y = relu(add(matmul(x, w, false, true), b));   // x @ w^T + b, then relu
//   Tensor p = softmax(y, -1);
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "devices/tensor.h"

namespace troupe {

// Elementwise, NumPy broadcasting, PyTorch type promotion (div of integers gives f32).
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);  // b as a 0-d tensor of a's dtype
Tensor mul(const Tensor& a, double b);
// Comparisons give bool tensors.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
// Unary; the transcendental ones turn integer inputs into f32.
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x, bool tanh_approximation = false);

// Matrix products. matmul follows numpy.matmul (1-d operands, broadcast batch dims);
// transpose_a/b transpose the last two dims of an operand without a copy.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);
Tensor bmm(const Tensor& a, const Tensor& b);                             // [B,M,K] @ [B,K,N]
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});  // x @ weight^T + bias
// linear for inference in bf16: x (f32, or bf16 already) and the weight (f32, rounded to bf16
// once and cached while it is unchanged, or bf16 already: used as it is), products accumulated in
// f32, then + bias (f32 or bf16) and the activation ("none", "relu", "gelu") fused; out in f32, or
// in bf16 for a next linear_bf16. Not differentiable.
Tensor linear_bf16(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, const std::string& activation = "none",
                   DType out_dtype = DType::f32);

// Reductions over dims (empty: all dims).
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor max(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor min(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);  // i64

Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);
// Normalises over the trailing dims named by normalized_shape; weight and bias optional.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);
// layer_norm(add(x, residual), {d}, weight, bias, eps) over the last dim d in one pass, the sum
// normalised in f32 before any rounding (bf16 rows read and written as bf16; weight and bias [d]
// in any floating dtype). Inference only: ValueError for inputs that require grad while grad mode
// is on (train with add and layer_norm).
Tensor add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight = {}, const Tensor& bias = {},
                      double eps = 1e-5);
// The same, also returning the sum x + residual (in x's dtype): {normed, sum}, for pre-norm layers.
std::pair<Tensor, Tensor> add_layer_norm_with_sum(const Tensor& x, const Tensor& residual, const Tensor& weight = {},
                                                  const Tensor& bias = {}, double eps = 1e-5);

// Joining, splitting, reordering, indexing.
Tensor cat(const std::vector<Tensor>& xs, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& xs, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim = 0);  // pieces of `size`, the last smaller
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
Tensor flip(const Tensor& x, const std::vector<int64_t>& dims);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor embedding(const Tensor& indices, const Tensor& weight);  // weight rows picked by indices
Tensor where(const Tensor& condition, const Tensor& x, const Tensor& y);
// ONNX GatherND: indices[..., m] address the leading m dims of data after batch_dims shared dims;
// negative indices wrap; an index out of range is an IndexError naming it.
Tensor gather_nd(const Tensor& data, const Tensor& indices, int64_t batch_dims = 0);
// The transformer fastpath's self-attention over packed sequences: qkv f32 [rows, 3d] (q | k | v),
// offsets i64 [B + 1] from 0 to rows, key_lengths i64 [B] (optional: only a sequence's first keys
// attended) -> the heads' context f32 [rows, d]. Inference only (not differentiable).
Tensor packed_attention(const Tensor& qkv, const Tensor& offsets, int64_t heads, const Tensor& key_lengths = {});

// Training: convolution, pooling, dropout and losses (PyTorch's F.* semantics). Gradients of every
// op flow through the tape (devices/autograd/autograd.h).
struct Conv2dOptions {
  std::vector<int64_t> stride{1, 1}, padding{0, 0}, dilation{1, 1};  // one value or (height, width)
  int64_t groups = 1;
};
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, const Conv2dOptions& options = {});
// stride empty: the kernel size. Indices: each maximum's h * W + w in its input plane (i64).
Tensor max_pool2d(const Tensor& x, const std::vector<int64_t>& kernel_size, const std::vector<int64_t>& stride = {},
                  const std::vector<int64_t>& padding = {0, 0});
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const std::vector<int64_t>& kernel_size,
                                                  const std::vector<int64_t>& stride = {},
                                                  const std::vector<int64_t>& padding = {0, 0});
// Random from the calling thread's generator (troupe::manual_seed); the identity unless training.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true);
Tensor dropout2d(const Tensor& x, double p = 0.5, bool training = true);  // whole channels
// input [N, C], target [N] (i64 or i32 class indices); reduction "mean", "sum" or "none".
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight = {},
                const std::string& reduction = "mean", int64_t ignore_index = -100);
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight = {},
                     const std::string& reduction = "mean", int64_t ignore_index = -100);

// Backward kernels: what the tape runs, callable directly.
Tensor relu_backward(const Tensor& grad, const Tensor& y);     // y = relu(x)
Tensor tanh_backward(const Tensor& grad, const Tensor& y);     // y = tanh(x)
Tensor sigmoid_backward(const Tensor& grad, const Tensor& y);  // y = sigmoid(x)
Tensor gelu_backward(const Tensor& grad, const Tensor& x, bool tanh_approximation = false);
Tensor conv2d_backward_input(const Tensor& grad, const Tensor& weight, const Shape& input_shape,
                             const Conv2dOptions& options = {});
// {d weight} or {d weight, d bias}.
std::vector<Tensor> conv2d_backward_weight(const Tensor& grad, const Tensor& x, const Shape& weight_shape, bool bias,
                                           const Conv2dOptions& options = {});
Tensor max_pool2d_backward(const Tensor& grad, const Tensor& indices, const Shape& input_shape);
Tensor dropout_backward(const Tensor& grad, const Tensor& mask, double p);
Tensor nll_loss_backward(const Tensor& grad, const Tensor& log_probs, const Tensor& target, const Tensor& weight = {},
                         const std::string& reduction = "mean", int64_t ignore_index = -100);
Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target,
                              const Tensor& weight = {}, const std::string& reduction = "mean",
                              int64_t ignore_index = -100);
// {dx} or, with a weight, {dx, d weight, d bias}.
std::vector<Tensor> layer_norm_backward(const Tensor& grad, const Tensor& x, const Shape& normalized_shape,
                                        const Tensor& weight = {}, double eps = 1e-5);
// BPTT for the lstm op: {dx, d weight_ih, d weight_hh, d bias_ih, d bias_hh, dh0, dc0}.
std::vector<Tensor> lstm_backward(const std::vector<Tensor>& lstm_inputs_with_states, const Tensor& grad_output,
                                  const Tensor& grad_h_n, const Tensor& grad_c_n);

}  // namespace troupe
