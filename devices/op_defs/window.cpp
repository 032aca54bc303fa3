#include "devices/op_defs/window.h"

#include <string>

#include "devices/error.h"

namespace troupe {

HeightWidth pair_attr(std::string_view op, const Attrs& attrs, const char* name, int64_t min,
                      std::optional<HeightWidth> when_empty) {
  const auto& v = attrs.get<std::vector<int64_t>>(name);
  if (v.empty() && when_empty) return *when_empty;
  if (v.empty() || v.size() > 2)
    throw ValueError(std::string(op) + ": " + name + " takes one or two values, got " + to_string(AttrValue(v)));
  const int64_t a = v[0], b = v.size() == 2 ? v[1] : v[0];
  if (a < min || b < min)
    throw ValueError(std::string(op) + ": " + name + " must be >= " + std::to_string(min) + ", got " +
                     to_string(AttrValue(v)));
  return {a, b};
}

}  // namespace troupe
