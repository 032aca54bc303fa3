// where(condition, x, y): x where condition holds, else y (torch.where). The three broadcast
// together; x and y are promoted to a common dtype. Broadcast inputs are read through stride-0
// views, never materialised.
#include "devices/registry.h"

namespace troupe {
namespace {

template <class T>
void select_elements(const Tensor& condition, const Tensor& x, const Tensor& y, T* out) {
  const bool* c = condition.data<bool>();
  const T* a = x.data<T>();
  const T* b = y.data<T>();
  const Shape& shape = condition.shape();
  const int64_t rank = condition.dim();
  if (rank == 0) {
    out[0] = c[0] ? a[0] : b[0];
    return;
  }
  // Odometer over all dims but the last, one offset per input; the innermost loop is strided.
  const Strides& sc = condition.strides();
  const Strides& sa = x.strides();
  const Strides& sb = y.strides();
  const int64_t inner = shape[rank - 1];
  const int64_t ic = sc[rank - 1], ia = sa[rank - 1], ib = sb[rank - 1];
  std::vector<int64_t> index(rank, 0);
  int64_t oc = 0, oa = 0, ob = 0;
  for (int64_t written = 0, n = condition.numel(); written < n; written += inner) {
    for (int64_t j = 0; j < inner; ++j) out[written + j] = c[oc + j * ic] ? a[oa + j * ia] : b[ob + j * ib];
    for (int64_t d = rank - 2; d >= 0; --d) {
      oc += sc[d];
      oa += sa[d];
      ob += sb[d];
      if (++index[d] < shape[d]) break;
      oc -= sc[d] * shape[d];
      oa -= sa[d] * shape[d];
      ob -= sb[d] * shape[d];
      index[d] = 0;
    }
  }
}

std::vector<Tensor> where_cpu(const OpCall& c) {
  const TensorMeta& meta = c.outputs[0];
  Tensor out = Tensor::empty(meta.shape, meta.dtype);
  if (out.numel() == 0) return {out};
  // Promote before expanding, so a conversion touches each input element once.
  const Tensor condition = c.inputs[0].expand(meta.shape);
  const Tensor x = c.inputs[1].to(meta.dtype).expand(meta.shape);
  const Tensor y = c.inputs[2].to(meta.dtype).expand(meta.shape);
  dispatch(meta.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    select_elements<T>(condition, x, y, out.mutable_data<T>());
  });
  return {out};
}

const OpRegistrar where_kernel{"where", DeviceType::cpu, where_cpu};

}  // namespace
}  // namespace troupe
