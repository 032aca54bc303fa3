#pragma once
// The attributes of adam_update and sgd_update, parsed once for every device's kernels (the ops
// are defined in optimizers.cpp beside this header).
#include <cstdint>

#include "devices/attrs.h"

namespace troupe {

// torch.optim.Adam's hyper-parameters and this step's number (from 1: the bias corrections).
struct AdamAttrs {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  int64_t step = 1;
};

// ValueError for a step below 1.
AdamAttrs adam_attrs(const Attrs& attrs);

// torch.optim.SGD's hyper-parameters.
struct SgdAttrs {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

SgdAttrs sgd_attrs(const Attrs& attrs);

}  // namespace troupe
