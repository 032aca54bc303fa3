// index_select and embedding (rows picked by an index), gather_nd (ONNX GatherND) and where
// (x where a condition holds, else y).
// Kernels: devices/cpu/index_select.cpp, gather_nd.cpp, where.cpp; devices/cuda/indexing.cu,
// gather_nd.cu.
#include <string>

#include "devices/registry.h"

namespace troupe {

namespace {

void check_index_dtype(std::string_view op, const char* role, const TensorMeta& index) {
  if (index.dtype != DType::i32 && index.dtype != DType::i64)
    throw DTypeError(std::string(op) + ": " + role + " must be i32 or i64, got " + index.str());
}

std::vector<TensorMeta> infer_index_select(const OpInfer& c) {
  const TensorMeta& x = c.inputs[0];
  const TensorMeta& index = c.inputs[1];
  if (x.shape.empty()) throw ShapeError("index_select: cannot index a 0-d tensor " + x.str());
  const int64_t dim = wrap_dim("index_select", c.attrs.get<int64_t>("dim"), static_cast<int64_t>(x.shape.size()));
  check_index_dtype(c.op, "the index", index);
  if (index.shape.size() != 1)
    throw ShapeError("index_select: the index must be 1-d, got " + index.str() + " (x is " + x.str() + ")");
  TensorMeta out = x;
  out.shape[dim] = index.shape[0];
  return {out};
}

std::vector<TensorMeta> infer_embedding(const OpInfer& c) {
  const TensorMeta& indices = c.inputs[0];
  const TensorMeta& weight = c.inputs[1];
  check_index_dtype(c.op, "indices", indices);
  if (weight.shape.size() != 2)
    throw ShapeError("embedding: the weight must be 2-d [V, D], got " + weight.str());
  TensorMeta out = weight;
  out.shape = indices.shape;
  out.shape.push_back(weight.shape[1]);
  return {out};
}

const OpRegistrar index_select_op{OpDef{
    .name = "index_select",
    .doc = "entries of x along dim picked by a 1-d i32/i64 index",
    .min_inputs = 2,
    .max_inputs = 2,
    .attrs = {{"dim", AttrType::integer, int64_t{0}, "the dim the index picks along"}},
    .infer = infer_index_select}};

const OpRegistrar embedding_op{OpDef{
    .name = "embedding",
    .doc = "rows of weight [V, D] picked by i32/i64 indices of any shape: indices.shape + [D]",
    .min_inputs = 2,
    .max_inputs = 2,
    .attrs = {},
    .infer = infer_embedding}};

std::vector<TensorMeta> infer_gather_nd(const OpInfer& c) {
  const TensorMeta& data = c.inputs[0];
  const TensorMeta& indices = c.inputs[1];
  const int64_t r = static_cast<int64_t>(data.shape.size());
  const int64_t q = static_cast<int64_t>(indices.shape.size());
  const int64_t b = c.attrs.get<int64_t>("batch_dims");
  const std::string both = " (data " + data.str() + ", indices " + indices.str() + ")";
  if (indices.dtype != DType::i32 && indices.dtype != DType::i64)
    throw DTypeError("gather_nd: indices must be i32 or i64" + both);
  if (r < 1 || q < 1) throw ShapeError("gather_nd: data and indices need rank >= 1" + both);
  if (b < 0) throw ValueError("gather_nd: batch_dims must be >= 0, got " + std::to_string(b));
  if (b >= std::min(q, r))
    throw ShapeError("gather_nd: batch_dims " + std::to_string(b) + " must be less than both ranks" + both);
  const int64_t m = indices.shape.back();
  if (m < 1 || m > r - b)
    throw ShapeError("gather_nd: indices.shape[-1] is " + std::to_string(m) + ", expected 1.." +
                     std::to_string(r - b) + " (rank of data minus batch_dims)" + both);
  for (int64_t d = 0; d < b; ++d)
    if (data.shape[d] != indices.shape[d])
      throw ShapeError("gather_nd: batch dim " + std::to_string(d) + " differs: " + std::to_string(data.shape[d]) +
                       " in data, " + std::to_string(indices.shape[d]) + " in indices" + both);
  TensorMeta out = data;
  out.shape.assign(indices.shape.begin(), indices.shape.end() - 1);
  out.shape.insert(out.shape.end(), data.shape.begin() + b + m, data.shape.end());
  return {out};
}

const OpRegistrar gather_nd_op{OpDef{
    .name = "gather_nd",
    .doc = "ONNX GatherND: slices of data addressed by index rows indices[..., m] (i32/i64, negative wrap)",
    .min_inputs = 2,
    .max_inputs = 2,
    .attrs = {{"batch_dims", AttrType::integer, int64_t{0}, "leading dims shared by data and indices"}},
    .infer = infer_gather_nd}};

std::vector<TensorMeta> infer_where(const OpInfer& c) {
  const TensorMeta& condition = c.inputs[0];
  const TensorMeta& x = c.inputs[1];
  const TensorMeta& y = c.inputs[2];
  if (condition.dtype != DType::boolean)
    throw DTypeError("where: the condition must be bool, got " + condition.str());
  const Shape shape = broadcast_shapes("where", broadcast_shapes("where", condition.shape, x.shape), y.shape);
  return {TensorMeta{promote(x.dtype, y.dtype), shape, x.device}};
}

const OpRegistrar where_op{OpDef{
    .name = "where",
    .doc = "x where the bool condition holds, else y; all three broadcast, x and y promote",
    .min_inputs = 3,
    .max_inputs = 3,
    .attrs = {},
    .infer = infer_where}};

}  // namespace
}  // namespace troupe
