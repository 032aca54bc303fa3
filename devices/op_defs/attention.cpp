// packed_attention: the transformer fastpath's self-attention over packed sequences (a nested
// tensor's tokens back to back), from the fused QKV projection to the heads' concatenated context.
// Kernels: devices/cpu/packed_attention.cpp, devices/cuda/packed_attention.cu.
#include "devices/op_defs/attention.h"

#include <string>

#include "devices/registry.h"

namespace troupe {

PackedAttentionDims packed_attention_dims(const Shape& qkv, const Attrs& attrs) {
  PackedAttentionDims d{.rows = qkv[0], .width = qkv[1] / 3, .heads = attrs.get<int64_t>("heads")};
  d.head_width = d.width / d.heads;
  return d;
}

namespace {

std::vector<TensorMeta> infer_packed_attention(const OpInfer& c) {
  const TensorMeta& qkv = c.inputs[0];
  const TensorMeta& offsets = c.inputs[1];
  const int64_t heads = c.attrs.get<int64_t>("heads");
  const std::string operands = " (qkv " + qkv.str() + ", offsets " + offsets.str() + ")";
  if ((qkv.dtype != DType::f32 && qkv.dtype != DType::bf16) || qkv.shape.size() != 2)
    throw ShapeError("packed_attention: qkv must be f32[rows, 3d] or bf16[rows, 3d]" + operands);
  if (heads < 1) throw ValueError("packed_attention: heads must be >= 1, got " + std::to_string(heads));
  if (qkv.shape[1] % (3 * heads) != 0)
    throw ShapeError("packed_attention: qkv's " + std::to_string(qkv.shape[1]) + " columns are not 3 x " +
                     std::to_string(heads) + " heads of equal width" + operands);
  if (offsets.dtype != DType::i64 || offsets.shape.size() != 1 || offsets.shape[0] < 2)
    throw ShapeError("packed_attention: offsets must be i64[B + 1] with B >= 1" + operands);
  if (c.inputs.size() > 2) {
    const TensorMeta& keys = c.inputs[2];
    if (keys.dtype != DType::i64 || keys.shape != Shape{offsets.shape[0] - 1})
      throw ShapeError("packed_attention: key_lengths must be i64[" + std::to_string(offsets.shape[0] - 1) +
                       "], got " + keys.str() + operands);
  }
  return {TensorMeta{qkv.dtype, {qkv.shape[0], qkv.shape[1] / 3}, qkv.device}};
}

const OpRegistrar packed_attention_op{OpDef{
    .name = "packed_attention",
    .doc = "self-attention of the transformer fastpath over packed sequences: qkv f32|bf16 [rows, 3d], offsets i64 [B+1], "
           "key_lengths i64 [B] (optional) -> context [rows, d] of qkv's dtype, per sequence and head softmax(q k^T / sqrt(hd)) v",
    .min_inputs = 2,
    .max_inputs = 3,
    .attrs = {{"heads", AttrType::integer, int64_t{1}, "attention heads (d / heads columns each)"}},
    .infer = infer_packed_attention,
    .not_differentiable = "the inference fastpath's attention; training runs matmul and softmax, which are"}};

}  // namespace
}  // namespace troupe
