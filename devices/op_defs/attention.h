#pragma once
// packed_attention's sizes, worked out once for every device's kernels from qkv and the heads
// attribute (the op is defined in attention.cpp beside this header; inference has checked them).
#include <cstdint>

#include "devices/attrs.h"
#include "devices/shape.h"

namespace troupe {

struct PackedAttentionDims {
  int64_t rows = 0;        // tokens of all sequences, back to back
  int64_t width = 0;       // d: the context's columns, a third of qkv's
  int64_t heads = 1;
  int64_t head_width = 0;  // d / heads
};

PackedAttentionDims packed_attention_dims(const Shape& qkv, const Attrs& attrs);

}  // namespace troupe
