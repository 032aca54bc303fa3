#include "devices/device.h"

#include <charconv>

#include "devices/error.h"

namespace troupe {

const char* name(DeviceType t) { return t == DeviceType::cpu ? "cpu" : "cuda"; }

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.substr(0, 5) == "cuda:") {
    int index = -1;
    auto digits = text.substr(5);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0) return cuda(index);
  }
  throw DeviceError("unknown device '" + std::string(text) + "' (expected cpu, cuda or cuda:N)");
}

std::string Device::str() const {
  return is_cpu() ? "cpu" : "cuda:" + std::to_string(index);
}

}  // namespace troupe
