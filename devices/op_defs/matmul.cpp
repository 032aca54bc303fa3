// Matrix products: matmul (numpy.matmul, with transposed operands), bmm, linear (x @ weight^T +
// bias) and linear_bf16 (linear in bf16 for inference, with a fused activation).
// Kernels: devices/cpu/matmul.cpp, devices/cuda/matmul.cpp, devices/cuda/linear_bf16.cu.
#include "devices/op_defs/matmul.h"

#include <string>

#include "devices/registry.h"

namespace troupe {

MatmulAttrs matmul_attrs(const Attrs& attrs) {
  return {.transpose_a = attrs.get<bool>("transpose_a"), .transpose_b = attrs.get<bool>("transpose_b")};
}

LinearBf16Attrs linear_bf16_attrs(const Attrs& attrs) {
  LinearBf16Attrs a;
  const std::string& activation = attrs.get<std::string>("activation");
  if (activation == "relu") a.activation = LinearActivation::relu;
  else if (activation == "gelu") a.activation = LinearActivation::gelu;
  else if (activation != "none")
    throw ValueError("linear_bf16: activation must be none, relu or gelu, got '" + activation + "'");
  const std::string& out = attrs.get<std::string>("out_dtype");
  if (out != "f32" && out != "bf16") throw ValueError("linear_bf16: out_dtype must be f32 or bf16, got '" + out + "'");
  a.out = out == "bf16" ? DType::bf16 : DType::f32;
  return a;
}

namespace {

bool gemm_dtype(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16 || t == DType::i32 ||
         t == DType::i64;
}

void check_dtypes(std::string_view op, const TensorMeta& a, const TensorMeta& b, const char* joint) {
  if (a.dtype != b.dtype)
    throw DTypeError(std::string(op) + ": dtypes differ: " + a.str() + joint + b.str());
  if (!gemm_dtype(a.dtype))
    throw DTypeError(std::string(op) + ": unsupported dtype " + name(a.dtype) + " (" + a.str() + joint + b.str() +
                     "); expected f32, f64, f16, bf16, i32 or i64");
}

std::vector<TensorMeta> infer_matmul(const OpInfer& c) {
  const TensorMeta& a = c.inputs[0];
  const TensorMeta& b = c.inputs[1];
  check_dtypes(c.op, a, b, " @ ");
  const std::string operands = a.str() + " @ " + b.str();
  if (a.shape.empty() || b.shape.empty())
    throw ShapeError("matmul: " + operands + ": operands must have at least one dimension");
  // Transposes swap the last two dims of operands that have two; a 1-d operand reads the same either way.
  Shape sa = a.shape, sb = b.shape;
  if (sa.size() >= 2 && c.attrs.get<bool>("transpose_a")) std::swap(sa[sa.size() - 2], sa[sa.size() - 1]);
  if (sb.size() >= 2 && c.attrs.get<bool>("transpose_b")) std::swap(sb[sb.size() - 2], sb[sb.size() - 1]);
  const bool a_vector = sa.size() == 1, b_vector = sb.size() == 1;
  if (a_vector) sa.insert(sa.begin(), 1);  // [K] -> [1, K]
  if (b_vector) sb.push_back(1);           // [K] -> [K, 1]
  const int64_t ka = sa.back(), kb = sb[sb.size() - 2];
  if (ka != kb)
    throw ShapeError("matmul: " + operands + ": inner dimensions " + std::to_string(ka) + " and " +
                     std::to_string(kb) + " differ");
  Shape out = broadcast_shapes("matmul", Shape(sa.begin(), sa.end() - 2), Shape(sb.begin(), sb.end() - 2));
  if (!a_vector) out.push_back(sa[sa.size() - 2]);
  if (!b_vector) out.push_back(sb.back());
  return {TensorMeta{a.dtype, out, a.device}};
}

std::vector<TensorMeta> infer_bmm(const OpInfer& c) {
  const TensorMeta& a = c.inputs[0];
  const TensorMeta& b = c.inputs[1];
  check_dtypes(c.op, a, b, " @ ");
  const std::string operands = a.str() + " @ " + b.str();
  if (a.shape.size() != 3 || b.shape.size() != 3)
    throw ShapeError("bmm: " + operands + ": expected two 3-d operands [B,M,K] @ [B,K,N]");
  if (a.shape[0] != b.shape[0])
    throw ShapeError("bmm: " + operands + ": batch sizes " + std::to_string(a.shape[0]) + " and " +
                     std::to_string(b.shape[0]) + " differ");
  if (a.shape[2] != b.shape[1])
    throw ShapeError("bmm: " + operands + ": inner dimensions " + std::to_string(a.shape[2]) + " and " +
                     std::to_string(b.shape[1]) + " differ");
  return {TensorMeta{a.dtype, {a.shape[0], a.shape[1], b.shape[2]}, a.device}};
}

std::vector<TensorMeta> infer_linear(const OpInfer& c) {
  const std::string op(c.op);
  const TensorMeta& x = c.inputs[0];
  const TensorMeta& weight = c.inputs[1];
  check_dtypes(c.op, x, weight, " with weight ");
  if (x.shape.empty())
    throw ShapeError(op + ": the input must have at least one dimension, got " + x.str());
  if (weight.shape.size() != 2)
    throw ShapeError(op + ": the weight must be 2-d [out, in], got " + weight.str());
  if (x.shape.back() != weight.shape[1])
    throw ShapeError(op + ": input " + x.str() + " with weight " + weight.str() + ": in features " +
                     std::to_string(x.shape.back()) + " and " + std::to_string(weight.shape[1]) + " differ");
  if (c.inputs.size() > 2) {
    const TensorMeta& bias = c.inputs[2];
    if (bias.dtype != x.dtype)
      throw DTypeError(op + ": the bias " + bias.str() + " does not match the input " + x.str());
    if (bias.shape != Shape{weight.shape[0]})
      throw ShapeError(op + ": the bias must be [" + std::to_string(weight.shape[0]) + "] for weight " +
                       weight.str() + ", got " + bias.str());
  }
  Shape out(x.shape.begin(), x.shape.end() - 1);
  out.push_back(weight.shape[0]);
  return {TensorMeta{x.dtype, out, x.device}};
}

// linear_bf16 takes what linear takes, x, the weight and the bias each in f32 or bf16 (already
// rounded); the output is f32 or, by out_dtype, bf16.
std::vector<TensorMeta> infer_linear_bf16(const OpInfer& c) {
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.inputs[i].dtype != DType::f32 && c.inputs[i].dtype != DType::bf16)
      throw DTypeError("linear_bf16: expects x, the weight and the bias in f32 or bf16 (f32 is rounded to bf16), "
                       "got " + c.inputs[i].str());
  const LinearBf16Attrs attrs = linear_bf16_attrs(c.attrs);
  const std::vector<TensorMeta> as_f32{TensorMeta{DType::f32, c.inputs[0].shape, c.inputs[0].device},
                                       TensorMeta{DType::f32, c.inputs[1].shape, c.inputs[1].device}};
  std::vector<TensorMeta> metas = infer_linear(OpInfer{c.op, as_f32, c.attrs});
  if (c.inputs.size() > 2 && c.inputs[2].shape != Shape{c.inputs[1].shape[0]})
    throw ShapeError("linear_bf16: the bias must be [" + std::to_string(c.inputs[1].shape[0]) + "] for weight " +
                     c.inputs[1].str() + ", got " + c.inputs[2].str());
  metas[0].dtype = attrs.out;
  return metas;
}

const OpRegistrar matmul_op{OpDef{
    .name = "matmul",
    .doc = "numpy.matmul: 1-d operands promoted and squeezed, batch dims broadcast; transpose_a/transpose_b "
           "swap the last two dims of a 2-d or higher operand",
    .min_inputs = 2,
    .max_inputs = 2,
    .attrs = {{"transpose_a", AttrType::boolean, false, "use a's last two dims transposed"},
              {"transpose_b", AttrType::boolean, false, "use b's last two dims transposed"}},
    .infer = infer_matmul}};

const OpRegistrar bmm_op{OpDef{.name = "bmm",
                               .doc = "batched matrix product [B,M,K] @ [B,K,N] -> [B,M,N]",
                               .min_inputs = 2,
                               .max_inputs = 2,
                               .attrs = {},
                               .infer = infer_bmm}};

const OpRegistrar linear_op{OpDef{.name = "linear",
                                  .doc = "x [..., in] @ weight[out, in]^T + bias[out] (bias optional)",
                                  .min_inputs = 2,
                                  .max_inputs = 3,
                                  .attrs = {},
                                  .infer = infer_linear}};

const OpRegistrar linear_bf16_op{OpDef{
    .name = "linear_bf16",
    .doc = "linear in bf16 for inference: x (f32, or bf16 already) and weight (f32, or bf16 already) rounded to "
           "bf16 (the weight once, cached), products accumulated in f32, then + bias and the activation in the same pass; f32 or bf16 out; "
           "AMX or AVX512-BF16 where the CPU has them",
    .min_inputs = 2,
    .max_inputs = 3,
    .attrs = {{"activation", AttrType::string, std::string("none"), "none, relu or gelu (erf form), after the bias"},
              {"out_dtype", AttrType::string, std::string("f32"), "f32, or bf16 for a next linear_bf16"}},
    .infer = infer_linear_bf16,
    .not_differentiable = "an inference kernel: train with linear, whose gradients are exact f32"}};

}  // namespace
}  // namespace troupe
