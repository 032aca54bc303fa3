#pragma once
// The attributes of nll_loss, cross_entropy and their backward ops, parsed once for every device's
// kernels (the ops are defined in losses.cpp beside this header).
#include <cstdint>
#include <string_view>

#include "devices/attrs.h"

namespace troupe {

enum class LossReduction { none, mean, sum };

struct LossAttrs {
  LossReduction reduction = LossReduction::mean;
  int64_t ignore_index = -100;  // samples whose target is this count for nothing
};

// ValueError naming op for a reduction other than "mean", "sum" or "none".
LossAttrs loss_attrs(std::string_view op, const Attrs& attrs);

}  // namespace troupe
