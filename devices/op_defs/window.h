#pragma once
// The (height, width) attributes of the 2-d window ops (conv2d, max_pool2d): stride=[2] means 2x2,
// stride=[2, 1] means 2 down and 1 across.
#include <cstdint>
#include <optional>
#include <string_view>

#include "devices/attrs.h"

namespace troupe {

struct HeightWidth {
  int64_t h = 0, w = 0;
};

// attrs[name] as (h, w): one value for both or two; when_empty where an empty list is allowed.
// ValueError naming op and the attribute for another count or a value below min.
HeightWidth pair_attr(std::string_view op, const Attrs& attrs, const char* name, int64_t min,
                      std::optional<HeightWidth> when_empty = std::nullopt);

}  // namespace troupe
