#pragma once
// The attributes of dropout and dropout2d, parsed once for every device's kernels (the ops are
// defined in dropout.cpp beside this header).
#include <string_view>

#include "devices/attrs.h"

namespace troupe {

struct DropoutAttrs {
  double p = 0.5;         // probability of zeroing an element (a channel, for dropout2d)
  bool training = true;
  // Off in eval mode or with p = 0: x passes through and the mask is empty.
  bool active() const { return training && p > 0.0; }
};

// ValueError naming op for p outside [0, 1].
DropoutAttrs dropout_attrs(std::string_view op, const Attrs& attrs);

}  // namespace troupe
