// matmul (numpy.matmul semantics, optional transposes of the last two dims), bmm and linear on the
// host. f32/f64 go to GEMM (devices/cpu/gemm.h) reading views in place: a matrix whose rows or
// columns are unit-stride is passed with a transpose flag and leading dimension, never copied.
// linear reuses packed f32 weights (devices/cpu/gemm_packed.h) from their second use on;
// linear_bf16 is its inference form in bf16 (devices/cpu/gemm_bf16.h).
// f16/bf16 compute in f32; i32/i64 use a plain loop that wraps on overflow like PyTorch.
#include <algorithm>
#include <optional>

#include "devices/cpu/gemm.h"
#include "devices/cpu/gemm_bf16.h"
#include "devices/cpu/gemm_packed.h"
#include "devices/op_defs/matmul.h"
#include "devices/registry.h"

namespace troupe {
namespace {

// ---- Inference ----

// ---- Kernels ----

// How GEMM reads the last two dims of a view: row-major with leading dimension ld, or transposed.
struct Layout {
  bool trans = false;
  int64_t ld = 1;
};

// nullopt when neither the rows nor the columns are unit-stride (the view needs a copy).
// A dim of size 1 may have any stride, so it never stands in the way.
std::optional<Layout> gemm_layout(const Tensor& x) {
  const int64_t rows = x.size(-2), cols = x.size(-1);
  const int64_t row_stride = x.strides()[x.dim() - 2], col_stride = x.strides()[x.dim() - 1];
  if (col_stride == 1 || cols == 1) {
    const int64_t ld = rows == 1 ? std::max<int64_t>(1, cols) : row_stride;
    if (ld >= std::max<int64_t>(1, cols)) return Layout{false, ld};
  }
  if (row_stride == 1 || rows == 1) {
    const int64_t ld = cols == 1 ? std::max<int64_t>(1, rows) : col_stride;
    if (ld >= std::max<int64_t>(1, rows)) return Layout{true, ld};
  }
  return std::nullopt;
}

Tensor gemm_ready(const Tensor& x) { return gemm_layout(x) ? x : x.contiguous(); }

// The stride that walks the first `count` dims of x as one dim (`unit` when they all have size 1),
// or nullopt when they do not fuse.
std::optional<int64_t> fused_stride(const Tensor& x, int64_t count, int64_t unit) {
  std::optional<int64_t> stride;
  int64_t expected = 0;
  for (int64_t d = count - 1; d >= 0; --d) {
    if (x.size(d) == 1) continue;
    if (stride && x.strides()[d] != expected) return std::nullopt;
    if (!stride) stride = x.strides()[d];
    expected = x.strides()[d] * x.size(d);
  }
  return stride ? stride : unit;
}

void gemm_typed(const Layout& la, const Layout& lb, int64_t m, int64_t n, int64_t k, const float* a, const float* b,
                float beta, float* c) {
  gemm_f32(la.trans, lb.trans, m, n, k, 1.0f, a, la.ld, b, lb.ld, beta, c, n);
}

void gemm_typed(const Layout& la, const Layout& lb, int64_t m, int64_t n, int64_t k, const double* a,
                const double* b, double beta, double* c) {
  gemm_f64(la.trans, lb.trans, m, n, k, 1.0, a, la.ld, b, lb.ld, beta, c, n);
}

// C[m,n] = A @ B (+ C when accumulate) over arbitrary strides, wrapping on overflow.
template <class T>
void integer_product(const T* a, int64_t a_rs, int64_t a_cs, const T* b, int64_t b_rs, int64_t b_cs, int64_t m,
                     int64_t n, int64_t k, bool accumulate, T* c) {
  std::vector<uint64_t> row(static_cast<size_t>(n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) row[j] = accumulate ? static_cast<uint64_t>(c[i * n + j]) : 0;
    for (int64_t p = 0; p < k; ++p) {
      const uint64_t scale = static_cast<uint64_t>(a[i * a_rs + p * a_cs]);
      const T* b_row = b + p * b_rs;
      for (int64_t j = 0; j < n; ++j) row[j] += scale * static_cast<uint64_t>(b_row[j * b_cs]);
    }
    for (int64_t j = 0; j < n; ++j) c[i * n + j] = static_cast<T>(row[j]);
  }
}

// out[batch..., m, n] (contiguous) = a[batch..., m, k] @ b[batch..., k, n] (+ out when accumulate).
// a and b have the same batch dims (expanded views; stride 0 where broadcast).
template <class T>
void batched_product(const Tensor& a, const Tensor& b, Tensor& out, bool accumulate) {
  const int64_t batch_dims = a.dim() - 2;
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  const Shape batch(out.shape().begin(), out.shape().end() - 2);
  const int64_t batches = numel(batch);
  T* c = out.mutable_data<T>();
  if (m == 0 || n == 0 || batches == 0) return;
  if (k == 0) {
    if (!accumulate) std::fill(c, c + out.numel(), T(0));
    return;
  }
  const T* a_data = a.data<T>();
  const T* b_data = b.data<T>();
  const T beta = accumulate ? T(1) : T(0);
  const Layout la = *gemm_layout(a), lb = *gemm_layout(b);  // the callers made both GEMM-ready
  if constexpr (std::is_floating_point_v<T>) {
    // One GEMM when b is the same matrix for every batch and a's batch and row dims fuse into rows.
    bool b_shared = true;
    for (int64_t d = 0; d < batch_dims; ++d) b_shared = b_shared && (b.size(d) == 1 || b.strides()[d] == 0);
    const std::optional<int64_t> rows_stride = fused_stride(a, batch_dims + 1, la.ld);
    if (b_shared && !la.trans && rows_stride && *rows_stride >= std::max<int64_t>(1, k)) {
      gemm_typed(Layout{false, *rows_stride}, lb, batches * m, n, k, a_data, b_data, beta, c);
      return;
    }
  }
  // Otherwise one product per batch, walking the batch dims like an odometer.
  std::vector<int64_t> index(static_cast<size_t>(batch_dims), 0);
  int64_t a_offset = 0, b_offset = 0;
  for (int64_t i = 0; i < batches; ++i) {
    T* c_batch = c + i * m * n;
    if constexpr (std::is_floating_point_v<T>) {
      gemm_typed(la, lb, m, n, k, a_data + a_offset, b_data + b_offset, beta, c_batch);
    } else {
      integer_product(a_data + a_offset, a.strides()[batch_dims], a.strides()[batch_dims + 1], b_data + b_offset,
                      b.strides()[batch_dims], b.strides()[batch_dims + 1], m, n, k, accumulate, c_batch);
    }
    for (int64_t d = batch_dims - 1; d >= 0; --d) {
      a_offset += a.strides()[d];
      b_offset += b.strides()[d];
      if (++index[d] < batch[d]) break;
      a_offset -= a.strides()[d] * batch[d];
      b_offset -= b.strides()[d] * batch[d];
      index[d] = 0;
    }
  }
}

void product(const Tensor& a, const Tensor& b, Tensor& out, bool accumulate) {
  switch (out.dtype()) {
    case DType::f32: return batched_product<float>(a, b, out, accumulate);
    case DType::f64: return batched_product<double>(a, b, out, accumulate);
    case DType::i32: return batched_product<int32_t>(a, b, out, accumulate);
    case DType::i64: return batched_product<int64_t>(a, b, out, accumulate);
    default: throw DTypeError(std::string("matmul: no host product for ") + name(out.dtype()));
  }
}

// f16 and bf16 compute in f32 (converted before any broadcast, so each element converts once).
DType compute_dtype(DType t) { return t == DType::f16 || t == DType::bf16 ? DType::f32 : t; }

Shape with_matrix(Shape batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

Tensor matmul_tensors(Tensor a, Tensor b, bool transpose_a, bool transpose_b, const TensorMeta& meta) {
  const DType dtype = compute_dtype(meta.dtype);
  a = a.to(dtype);
  b = b.to(dtype);
  if (a.dim() >= 2 && transpose_a) a = a.transpose(-2, -1);
  if (b.dim() >= 2 && transpose_b) b = b.transpose(-2, -1);
  if (a.dim() == 1) a = a.unsqueeze(0);
  if (b.dim() == 1) b = b.unsqueeze(-1);
  // Copies happen here, before broadcasting, so a broadcast operand is never materialised.
  a = gemm_ready(a);
  b = gemm_ready(b);
  const Shape batch = broadcast_shapes("matmul", Shape(a.shape().begin(), a.shape().end() - 2),
                                       Shape(b.shape().begin(), b.shape().end() - 2));
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  Tensor out = Tensor::empty(with_matrix(batch, m, n), dtype);
  product(a.expand(with_matrix(batch, m, k)), b.expand(with_matrix(batch, k, n)), out, false);
  return out.to(meta.dtype).view(meta.shape);  // drops the dims 1-d operands gained
}

std::vector<Tensor> matmul_cpu(const OpCall& c) {
  const MatmulAttrs a = matmul_attrs(c.attrs);
  return {matmul_tensors(c.inputs[0], c.inputs[1], a.transpose_a, a.transpose_b, c.outputs[0])};
}

std::vector<Tensor> bmm_cpu(const OpCall& c) { return {matmul_tensors(c.inputs[0], c.inputs[1], false, false, c.outputs[0])}; }

// One GEMM over all leading dims of x folded into rows; on the libraries' path the bias is
// broadcast into the output first and the product accumulated onto it.
std::vector<Tensor> linear_cpu(const OpCall& c) {
  const TensorMeta& meta = c.outputs[0];
  const DType dtype = compute_dtype(meta.dtype);
  const Tensor x = c.inputs[0].to(dtype);
  const Tensor weight = c.inputs[1].to(dtype);
  const int64_t in = weight.size(1), out_features = weight.size(0);
  const Tensor rows = gemm_ready(x.dim() == 2 ? x : x.reshape({numel(Shape(x.shape().begin(), x.shape().end() - 1)), in}));
  Tensor out = Tensor::empty({rows.size(0), out_features}, dtype);
  const bool has_bias = c.inputs.size() > 2;
  // An f32 weight used again (inference) goes through its cached packed form, the bias added as
  // the product is stored: oneDNN's sgemm re-packs the weight on every call, which costs up to
  // half the time when there are few rows.
  const std::optional<Layout> layout = gemm_layout(rows);
  if (meta.dtype == DType::f32 && layout && !layout->trans)
    if (auto packed = packed_weight(c.inputs[1], PackWhen::second_use)) {
      const Tensor bias = has_bias ? c.inputs[2].to(dtype).contiguous() : Tensor();
      gemm_packed_f32(rows.size(0), rows.data<float>(), layout->ld, *packed, 0.0f, out.mutable_data<float>(),
                      out_features, has_bias ? bias.data<float>() : nullptr);
      return {out.view(meta.shape)};
    }
  if (has_bias) {
    const Tensor bias = c.inputs[2].to(dtype).contiguous();
    dispatch(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* b = bias.data<T>();
      T* o = out.mutable_data<T>();
      for (int64_t r = 0; r < rows.size(0); ++r) std::copy(b, b + out_features, o + r * out_features);
    });
  }
  product(rows, gemm_ready(weight.transpose(0, 1)), out, has_bias);
  return {out.to(meta.dtype).view(meta.shape)};
}

GemmActivation gemm_activation(LinearActivation a) {
  switch (a) {
    case LinearActivation::relu: return GemmActivation::relu;
    case LinearActivation::gelu: return GemmActivation::gelu;
    default: return GemmActivation::none;
  }
}

// The rows rounded to bf16 on each call (unless they come in bf16), the weight once (its cached
// bf16 blocks, packed from an f32 or a bf16 weight), products accumulated in f32 with bias and activation applied by the same primitive.
std::vector<Tensor> linear_bf16_cpu(const OpCall& c) {
  const TensorMeta& meta = c.outputs[0];
  const Tensor& x = c.inputs[0];
  const int64_t in = c.inputs[1].size(1), out_features = c.inputs[1].size(0);
  Tensor rows = x.dim() == 2 ? x : x.reshape({numel(Shape(x.shape().begin(), x.shape().end() - 1)), in});
  std::optional<Layout> layout = gemm_layout(rows);
  if (!layout || layout->trans) {
    rows = rows.contiguous();
    layout = Layout{false, std::max<int64_t>(1, in)};
  }
  const Tensor bias = c.inputs.size() > 2 ? c.inputs[2].to(DType::f32).contiguous() : Tensor();
  Tensor out = Tensor::empty({rows.size(0), out_features}, meta.dtype);
  const GemmBf16Epilogue epilogue{.bias = bias.defined() ? bias.data<float>() : nullptr,
                                  .activation = gemm_activation(linear_bf16_attrs(c.attrs).activation),
                                  .bf16_out = meta.dtype == DType::bf16};
  const auto weight = packed_weight_bf16(c.inputs[1]);
  if (x.dtype() == DType::bf16)
    gemm_bf16(rows.size(0), rows.data<BFloat16>(), layout->ld, *weight, epilogue, out.mutable_raw_data(), out_features);
  else
    gemm_bf16(rows.size(0), rows.data<float>(), layout->ld, *weight, epilogue, out.mutable_raw_data(), out_features);
  return {out.view(meta.shape)};
}

const OpRegistrar matmul_kernel{"matmul", DeviceType::cpu, matmul_cpu};
const OpRegistrar bmm_kernel{"bmm", DeviceType::cpu, bmm_cpu};
const OpRegistrar linear_kernel{"linear", DeviceType::cpu, linear_cpu};
const OpRegistrar linear_bf16_kernel{"linear_bf16", DeviceType::cpu, linear_bf16_cpu};

}  // namespace
}  // namespace troupe
