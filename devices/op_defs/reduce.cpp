// Reductions: sum, mean, max, min over dims (all when empty; keepdim keeps them as size 1) and
// argmax (the index of the first maximum along one dim, or of the flattened tensor).
// Kernels: devices/cpu/reduce.cpp, devices/cuda/reduce.cu.
#include "devices/op_defs/reduce.h"

#include <algorithm>
#include <string>

#include "devices/registry.h"

namespace troupe {

Reduction plan_reduction(const std::string& op, const TensorMeta& x, const std::vector<int64_t>& dims,
                         bool keepdim) {
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  Reduction plan;
  plan.reduced.assign(rank, dims.empty());
  std::vector<bool> seen(std::max<int64_t>(rank, 1), false);
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(op.c_str(), d, rank);
    if (seen[w])
      throw ValueError(op + ": dim " + std::to_string(d) + " appears more than once in dims of " + x.str());
    seen[w] = true;
    if (rank > 0) plan.reduced[w] = true;  // a 0-d tensor's dim 0 is itself: nothing to reduce
  }
  for (int64_t d = 0; d < rank; ++d) {
    if (!plan.reduced[d]) plan.out_shape.push_back(x.shape[d]);
    else if (keepdim) plan.out_shape.push_back(1);
    if (plan.reduced[d]) plan.count *= x.shape[d];
  }
  return plan;
}

namespace {

Reduction plan_from_attrs(const OpInfer& c) {
  return plan_reduction(std::string(c.op), c.inputs[0], c.attrs.get<std::vector<int64_t>>("dims"),
                        c.attrs.get<bool>("keepdim"));
}

void require_nonempty(const std::string& op, const TensorMeta& x, const Reduction& plan) {
  if (plan.count == 0)
    throw ShapeError(op + ": cannot reduce over zero elements of " + x.str() + " (it has no identity)");
}

std::vector<AttrSpec> reduction_attrs() {
  return {{"dims", AttrType::int_list, std::vector<int64_t>{}, "dims to reduce (empty: all)"},
          {"keepdim", AttrType::boolean, false, "keep reduced dims as size 1"}};
}

const OpRegistrar sum_op{OpDef{
    .name = "sum",
    .doc = "sum over dims (bool and integers give i64)",
    .attrs = reduction_attrs(),
    .infer =
        [](const OpInfer& c) {
          const TensorMeta& x = c.inputs[0];
          const Reduction plan = plan_from_attrs(c);
          return std::vector<TensorMeta>{{is_floating(x.dtype) ? x.dtype : DType::i64, plan.out_shape, x.device}};
        }}};

const OpRegistrar mean_op{OpDef{
    .name = "mean",
    .doc = "mean over dims (floating tensors; NaN over zero elements)",
    .attrs = reduction_attrs(),
    .infer =
        [](const OpInfer& c) {
          const TensorMeta& x = c.inputs[0];
          if (!is_floating(x.dtype))
            throw DTypeError("mean: needs a floating tensor, got " + x.str() + " (convert it with to(f32) first)");
          return std::vector<TensorMeta>{{x.dtype, plan_from_attrs(c).out_shape, x.device}};
        }}};

std::vector<TensorMeta> infer_extreme(const OpInfer& c) {
  const TensorMeta& x = c.inputs[0];
  const Reduction plan = plan_from_attrs(c);
  require_nonempty(std::string(c.op), x, plan);
  return {{x.dtype, plan.out_shape, x.device}};
}

const OpRegistrar max_op{OpDef{.name = "max",
                               .doc = "maximum over dims (NaN propagates)",
                               .attrs = reduction_attrs(),
                               .infer = infer_extreme}};

const OpRegistrar min_op{OpDef{.name = "min",
                               .doc = "minimum over dims (NaN propagates)",
                               .attrs = reduction_attrs(),
                               .infer = infer_extreme}};

const OpRegistrar argmax_op{OpDef{
    .name = "argmax",
    .doc = "i64 index of the first maximum over one dim, or over the flattened tensor when dims is empty "
           "(NaN counts as the maximum)",
    .attrs = {{"dims", AttrType::int_list, std::vector<int64_t>{}, "empty (flattened) or exactly one dim"},
              {"keepdim", AttrType::boolean, false, "keep the reduced dim(s) as size 1"}},
    .infer =
        [](const OpInfer& c) {
          const TensorMeta& x = c.inputs[0];
          const auto& dims = c.attrs.get<std::vector<int64_t>>("dims");
          if (dims.size() > 1)
            throw ValueError("argmax: takes one dim or none (flattened), got " + to_string(dims) +
                             " for " + x.str());
          const Reduction plan = plan_from_attrs(c);
          require_nonempty("argmax", x, plan);
          return std::vector<TensorMeta>{{DType::i64, plan.out_shape, x.device}};
        },
    .not_differentiable = "integer output (i64 indices)"}};

}  // namespace
}  // namespace troupe
