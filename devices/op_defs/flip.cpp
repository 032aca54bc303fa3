// flip: reverses the order of elements along the given dims (torch.flip). A flipped dim is a
// negative stride starting at the dim's last element; the strided copy then reads it in order.
// That copy is the device's own (clone() of a cuda view runs on the GPU), so the same kernel serves
// cpu and cuda tensors, and lives here with its definition.
#include "devices/registry.h"

namespace troupe {
namespace {

// The dims to flip, wrapped; ShapeError when one repeats.
std::vector<int64_t> flip_dims(const std::vector<int64_t>& dims, const TensorMeta& x) {
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  std::vector<int64_t> wrapped;
  for (int64_t d : dims) {
    const int64_t w = wrap_dim("flip", d, rank);
    for (int64_t seen : wrapped)
      if (seen == w)
        throw ShapeError("flip: dim " + std::to_string(d) + " repeated in " + to_string(AttrValue(dims)) +
                         " for " + x.str());
    wrapped.push_back(w);
  }
  return wrapped;
}

std::vector<TensorMeta> infer_flip(const OpInfer& c) {
  flip_dims(c.attrs.get<std::vector<int64_t>>("dims"), c.inputs[0]);
  return {c.inputs[0]};
}

std::vector<Tensor> flip_view_copy(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  if (x.dim() == 0 || x.numel() == 0) return {x.clone()};  // nothing to reorder
  Strides strides = x.strides();
  int64_t offset = x.offset();
  for (int64_t d : flip_dims(c.attrs.get<std::vector<int64_t>>("dims"), x.meta())) {
    offset += (x.shape()[d] - 1) * strides[d];
    strides[d] = -strides[d];
  }
  return {Tensor(x.storage(), x.dtype(), x.shape(), strides, offset).clone()};
}

const OpRegistrar flip_op{OpDef{
    .name = "flip",
    .doc = "reverses x along each of dims",
    .attrs = {{"dims", AttrType::int_list, std::nullopt, "the dims to reverse"}},
    .infer = infer_flip,
    .kernels = {{DeviceType::cpu, flip_view_copy}, {DeviceType::cuda, flip_view_copy}}}};

}  // namespace
}  // namespace troupe
