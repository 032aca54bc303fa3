#pragma once
// The typed C++ front of the op registry: each function runs the registered op of the same
// name on the inputs' device. Errors name the op, shapes and dtypes.
//
//   Tensor y = relu(add(matmul(x, w, false, true), b));   // x @ w^T + b, then relu
//   Tensor p = softmax(y, -1);
#include <optional>
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

}  // namespace troupe
