// The Tensor view methods and conversions as registry ops, so `troupe op` and dataflow graphs can
// run them: reshape, transpose, permute, squeeze, unsqueeze, contiguous, cast. Each kernel is the
// Tensor method; inference runs the same method on a tensor without bytes, so the two can never
// disagree on shapes or errors. Views need no device code: one kernel serves cpu and cuda, and
// lives here with its definition.
#include "devices/registry.h"

namespace troupe {
namespace {

// A tensor with the input's dtype and shape but no storage: the view methods only do shape work.
Tensor shape_probe(const TensorMeta& meta) {
  return Tensor(nullptr, meta.dtype, meta.shape, contiguous_strides(meta.shape), 0);
}

using ViewFn = Tensor (*)(const Tensor&, const Attrs&);

// An op that applies fn to its one input, in inference (on a probe) and in the kernel.
OpDef view_op(std::string name, std::string doc, std::vector<AttrSpec> attrs, ViewFn fn) {
  auto kernel = [fn](const OpCall& c) { return std::vector<Tensor>{fn(c.inputs[0], c.attrs)}; };
  return OpDef{
      .name = std::move(name),
      .doc = std::move(doc),
      .attrs = std::move(attrs),
      .infer =
          [fn](const OpInfer& c) {
            const TensorMeta& x = c.inputs[0];
            const Tensor y = fn(shape_probe(x), c.attrs);
            return std::vector<TensorMeta>{TensorMeta{y.dtype(), y.shape(), x.device}};
          },
      .kernels = {{DeviceType::cpu, kernel}, {DeviceType::cuda, kernel}}};
}

Tensor reshape_fn(const Tensor& x, const Attrs& a) { return x.reshape(a.get<std::vector<int64_t>>("shape")); }
Tensor transpose_fn(const Tensor& x, const Attrs& a) {
  return x.transpose(a.get<int64_t>("dim0"), a.get<int64_t>("dim1"));
}
Tensor permute_fn(const Tensor& x, const Attrs& a) { return x.permute(a.get<std::vector<int64_t>>("dims")); }
Tensor squeeze_fn(const Tensor& x, const Attrs& a) { return x.squeeze(a.get<int64_t>("dim")); }
Tensor unsqueeze_fn(const Tensor& x, const Attrs& a) { return x.unsqueeze(a.get<int64_t>("dim")); }

// A probe has no bytes to copy: contiguous and cast keep its shape and set the dtype.
Tensor contiguous_fn(const Tensor& x, const Attrs&) { return x.defined() ? x.contiguous() : x; }
Tensor cast_fn(const Tensor& x, const Attrs& a) {
  const std::string& dtype = a.get<std::string>("dtype");
  DType target;
  try {
    target = dtype_from_name(dtype);
  } catch (const DTypeError& e) {
    throw DTypeError(std::string("cast: ") + e.what() + " for " + x.meta().str());
  }
  if (!x.defined()) return Tensor(nullptr, target, x.shape(), x.strides(), 0);
  return x.to(target);
}

const OpRegistrar reshape_op{view_op("reshape", "x with a new shape of as many elements (one -1 inferred); a view when possible",
                                     {{"shape", AttrType::int_list, std::nullopt, "the new shape"}}, reshape_fn)};
const OpRegistrar transpose_op{view_op("transpose", "x with dims dim0 and dim1 swapped; a view",
                                       {{"dim0", AttrType::integer, std::nullopt, "one dim"},
                                        {"dim1", AttrType::integer, std::nullopt, "the other dim"}},
                                       transpose_fn)};
const OpRegistrar permute_op{view_op("permute", "x with its dims reordered: out dim i is x dim dims[i]; a view",
                                     {{"dims", AttrType::int_list, std::nullopt, "a permutation of 0..rank-1"}},
                                     permute_fn)};
const OpRegistrar squeeze_op{view_op("squeeze", "x without dim when it has size 1 (else x); a view",
                                     {{"dim", AttrType::integer, std::nullopt, "the dim to drop"}}, squeeze_fn)};
const OpRegistrar unsqueeze_op{view_op("unsqueeze", "x with a new dim of size 1 at dim; a view",
                                       {{"dim", AttrType::integer, std::nullopt, "where the new dim goes"}},
                                       unsqueeze_fn)};
const OpRegistrar contiguous_op{view_op("contiguous", "x laid out row-major (x itself when it already is)", {},
                                        contiguous_fn)};
const OpRegistrar cast_op{view_op("cast", "x converted to dtype (x itself when it already has it)",
                                  {{"dtype", AttrType::string, std::nullopt, "f32 f64 f16 bf16 i32 i64 u8 bool, or numpy names"}},
                                  cast_fn)};

}  // namespace
}  // namespace troupe
