// Backward of matmul, bmm and linear. For C = op(A) @ op(B) (op: the optional transposes):
// dA = g @ op(B)^T and dB = op(A)^T @ g, transposed back when the forward transposed; batch dims
// that broadcast are summed back, and 1-d operands regain and lose their unit dim.
#include "devices/autograd/backward_registry.h"
#include "devices/autograd/grad_utils.h"

namespace troupe {
namespace {

using Grads = std::vector<Tensor>;

Grads matmul_grads(const BackwardCall& c, bool ta, bool tb) {
  Tensor a = c.inputs[0], b = c.inputs[1], g = c.grads[0];
  const bool a_vector = a.dim() == 1, b_vector = b.dim() == 1;
  if (a_vector) a = a.unsqueeze(0), ta = false;
  if (b_vector) b = b.unsqueeze(-1), tb = false;
  if (b_vector) g = g.unsqueeze(-1);
  if (a_vector) g = g.unsqueeze(g.dim() - 1);
  Tensor da, db;
  if (c.needs[0]) {
    da = ta ? matmul(b, g, tb, true) : matmul(g, b, false, !tb);
    da = sum_to(da, a.shape()).reshape(c.input_metas[0].shape);
  }
  if (c.needs[1]) {
    db = tb ? matmul(g, a, true, ta) : matmul(a, g, !ta, false);
    db = sum_to(db, b.shape()).reshape(c.input_metas[1].shape);
  }
  return {da, db};
}

Grads matmul_backward(const BackwardCall& c) {
  return matmul_grads(c, c.attrs.get<bool>("transpose_a"), c.attrs.get<bool>("transpose_b"));
}

Grads bmm_backward(const BackwardCall& c) { return matmul_grads(c, false, false); }

// y = x @ w^T + b over rows: dx = g @ w, dw = g_rows^T @ x_rows, db = column sums of g.
Grads linear_backward(const BackwardCall& c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &g = c.grads[0];
  const int64_t out_features = w.size(0), in_features = w.size(1);
  const Tensor g_rows = g.reshape({-1, out_features});
  Grads grads(c.inputs.size());
  if (c.needs[0]) grads[0] = matmul(g, w);
  if (c.needs[1]) grads[1] = matmul(g_rows, x.reshape({-1, in_features}), true, false);
  if (grads.size() > 2 && c.needs[2]) grads[2] = sum(g_rows, {0});
  return grads;
}

const BackwardRegistrar linalg_backwards[] = {
    BackwardRegistrar({"matmul", matmul_backward}),
    BackwardRegistrar({"bmm", bmm_backward}),
    BackwardRegistrar({"linear", linear_backward}),
};

}  // namespace
}  // namespace troupe
