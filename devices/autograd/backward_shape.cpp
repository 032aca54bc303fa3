// Backward of the ops that move elements without arithmetic: views (reshape, view, squeeze,
// unsqueeze, transpose, permute, expand, slice, select), copies (contiguous, clone, cast),
// joins and cuts (cat, stack, split, chunk, flip) and gathers (index_select, embedding,
// gather_nd), whose backward scatters the gradient, adding where an index repeats.
#include <functional>

#include "devices/autograd/backward_registry.h"
#include "devices/autograd/grad_utils.h"
#include "devices/cpu/loops.h"

namespace troupe {
namespace {

using Grads = std::vector<Tensor>;

Grads reshape_backward(const BackwardCall& c) { return {c.grads[0].reshape(c.input_metas[0].shape)}; }

Grads same_backward(const BackwardCall& c) { return {c.grads[0]}; }  // the engine converts the dtype

Grads transpose_backward(const BackwardCall& c) {
  return {c.grads[0].transpose(c.attrs.get<int64_t>("dim0"), c.attrs.get<int64_t>("dim1"))};
}

Grads permute_backward(const BackwardCall& c) {
  const auto& dims = c.attrs.get<std::vector<int64_t>>("dims");
  const int64_t rank = static_cast<int64_t>(dims.size());
  std::vector<int64_t> inverse(dims.size());
  for (int64_t i = 0; i < rank; ++i) inverse[wrap_dim("permute", dims[i], rank)] = i;
  return {c.grads[0].permute(inverse)};
}

Grads expand_backward(const BackwardCall& c) { return {sum_to(c.grads[0], c.input_metas[0].shape)}; }

// Zeros shaped like `meta` with `values` added at the elements the view `pick` takes of them.
Tensor scatter_into_zeros(const TensorMeta& meta, const Tensor& values, const std::function<Tensor(const Tensor&)>& pick) {
  Tensor out = Tensor::zeros(meta.shape, meta.dtype);
  void* base = out.mutable_raw_data();
  const Tensor view = pick(out);  // shares out's bytes: written below through base, never mutable_data
  dispatch(meta.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<compute_t<T>, float> || std::is_same_v<T, double>) {
      const Tensor v = values.to(meta.dtype);
      T* po = static_cast<T*>(base) + view.offset();
      const T* pv = v.data<T>();
      for_each_run<2>(view.shape(), {view.strides(), broadcast_strides(v, view.shape())},
                      [&](const auto& at, const auto& step, int64_t n) {
                        for (int64_t i = 0; i < n; ++i)
                          po[at[0] + i * step[0]] = convert<T>(compute_t<T>(po[at[0] + i * step[0]]) +
                                                               compute_t<T>(pv[at[1] + i * step[1]]));
                      });
    } else {
      throw DTypeError("backward: cannot scatter a gradient into " + meta.str());
    }
  });
  return out;
}

Grads slice_backward(const BackwardCall& c) {
  const int64_t dim = c.attrs.get<int64_t>("dim"), start = c.attrs.get<int64_t>("start"),
                end = c.attrs.get<int64_t>("end"), step = c.attrs.get<int64_t>("step");
  return {scatter_into_zeros(c.input_metas[0], c.grads[0],
                             [&](const Tensor& t) { return t.slice(dim, start, end, step); })};
}

Grads select_backward(const BackwardCall& c) {
  const int64_t dim = c.attrs.get<int64_t>("dim"), index = c.attrs.get<int64_t>("index");
  return {scatter_into_zeros(c.input_metas[0], c.grads[0], [&](const Tensor& t) { return t.select(dim, index); })};
}

Grads cat_backward(const BackwardCall& c) {
  const int64_t dim = wrap_dim("cat", c.attrs.get<int64_t>("dim"), static_cast<int64_t>(c.input_metas[0].shape.size()));
  Grads grads(c.input_metas.size());
  int64_t offset = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    const int64_t size = c.input_metas[i].shape[dim];
    if (c.needs[i]) grads[i] = c.grads[0].slice(dim, offset, offset + size);
    offset += size;
  }
  return grads;
}

Grads stack_backward(const BackwardCall& c) {
  const int64_t dim =
      wrap_dim("stack", c.attrs.get<int64_t>("dim"), static_cast<int64_t>(c.input_metas[0].shape.size()) + 1);
  Grads grads(c.input_metas.size());
  for (size_t i = 0; i < grads.size(); ++i)
    if (c.needs[i]) grads[i] = c.grads[0].select(dim, static_cast<int64_t>(i));
  return grads;
}

Grads split_backward(const BackwardCall& c) {  // every piece has a gradient (zeros where none arrived)
  return {cat(c.grads, c.attrs.get<int64_t>("dim"))};
}

Grads flip_backward(const BackwardCall& c) { return {flip(c.grads[0], c.attrs.get<std::vector<int64_t>>("dims"))}; }

// dx[outer, index[i], inner] += g[outer, i, inner].
Tensor index_add(const TensorMeta& meta, int64_t dim, const Tensor& index, const Tensor& grad) {
  Tensor out = Tensor::zeros(meta.shape, meta.dtype);
  const std::vector<int64_t> idx = index.to_vector<int64_t>();
  const int64_t n = meta.shape.empty() ? 1 : meta.shape[dim];
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= meta.shape[d];
  for (size_t d = dim + 1; d < meta.shape.size(); ++d) inner *= meta.shape[d];
  const int64_t picked = static_cast<int64_t>(idx.size());
  dispatch(meta.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<compute_t<T>, float> || std::is_same_v<T, double>) {
      const Tensor g = grad.to(meta.dtype).contiguous();
      const T* pg = g.data<T>();
      T* po = out.mutable_data<T>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < picked; ++i) {
          const int64_t at = idx[i] < 0 ? idx[i] + n : idx[i];
          T* dst = po + (o * n + at) * inner;
          const T* src = pg + (o * picked + i) * inner;
          for (int64_t k = 0; k < inner; ++k) dst[k] = convert<T>(compute_t<T>(dst[k]) + compute_t<T>(src[k]));
        }
    } else {
      throw DTypeError("backward: cannot scatter a gradient into " + meta.str());
    }
  });
  return out;
}

Grads index_select_backward(const BackwardCall& c) {
  const TensorMeta& x = c.input_metas[0];
  const int64_t dim = x.shape.empty() ? 0 : wrap_dim("index_select", c.attrs.get<int64_t>("dim"), x.shape.size());
  return {index_add(x, dim, c.inputs[1], c.grads[0]), Tensor()};
}

Grads embedding_backward(const BackwardCall& c) {  // inputs: indices, weight [V, D]
  const TensorMeta& w = c.input_metas[1];
  const Tensor flat = c.inputs[0].reshape({-1});
  return {Tensor(), index_add(w, 0, flat, c.grads[0].reshape({flat.numel(), w.shape[1]}))};
}

// GatherND: data viewed as [batches * addressed, slice] (addressed: the dims an index row names), the
// gradient of each picked slice added to the row it came from.
Grads gather_nd_backward(const BackwardCall& c) {  // inputs: data, indices [..., m]
  const TensorMeta& data = c.input_metas[0];
  const Tensor& indices = c.inputs[1];
  const int64_t batch_dims = c.attrs.get<int64_t>("batch_dims"), m = indices.size(-1);
  int64_t batches = 1, addressed = 1, slice = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(data.shape.size()); ++d) {
    if (d < batch_dims) batches *= data.shape[d];
    else if (d < batch_dims + m) addressed *= data.shape[d];
    else slice *= data.shape[d];
  }
  const std::vector<int64_t> index = indices.to_vector<int64_t>();
  const int64_t picked = static_cast<int64_t>(index.size()) / m, per_batch = batches ? picked / batches : 0;
  std::vector<int64_t> rows(picked);
  for (int64_t r = 0; r < picked; ++r) {
    int64_t row = 0;
    for (int64_t k = 0; k < m; ++k) {
      const int64_t size = data.shape[batch_dims + k], i = index[r * m + k];
      row = row * size + (i < 0 ? i + size : i);
    }
    rows[r] = r / per_batch * addressed + row;
  }
  const TensorMeta flat{data.dtype, {batches * addressed, slice}, data.device};
  const Tensor grad = index_add(flat, 0, Tensor::from_vector(rows, {picked}), c.grads[0].reshape({picked, slice}));
  return {grad.reshape(data.shape), Tensor()};
}

// The backward of a Tensor method that records itself (tensor.cpp; squeeze and unsqueeze record
// "reshape"). Most of these are registry ops as well.
BackwardDef method(const char* op, BackwardFn fn) {
  return {.op = op, .fn = fn, .saves_inputs = false, .tensor_method = true};
}

const BackwardRegistrar shape_backwards[] = {
    BackwardRegistrar(method("reshape", reshape_backward)),
    BackwardRegistrar({"squeeze", reshape_backward, false}),
    BackwardRegistrar({"unsqueeze", reshape_backward, false}),
    BackwardRegistrar(method("transpose", transpose_backward)),
    BackwardRegistrar(method("permute", permute_backward)),
    BackwardRegistrar(method("expand", expand_backward)),
    BackwardRegistrar(method("contiguous", same_backward)),
    BackwardRegistrar(method("clone", same_backward)),
    BackwardRegistrar(method("cast", same_backward)),
    BackwardRegistrar(method("slice", slice_backward)),
    BackwardRegistrar(method("select", select_backward)),
    BackwardRegistrar({"cat", cat_backward, false}),
    BackwardRegistrar({"stack", stack_backward, false}),
    BackwardRegistrar({"split", split_backward, false}),
    BackwardRegistrar({"chunk", split_backward, false}),
    BackwardRegistrar({"flip", flip_backward, false}),
    BackwardRegistrar({"index_select", index_select_backward}),
    BackwardRegistrar({"embedding", embedding_backward}),
    BackwardRegistrar({"gather_nd", gather_nd_backward}),
};

}  // namespace
}  // namespace troupe
