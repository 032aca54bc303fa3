#pragma once
// --json output: one line of figures, built with nlohmann::json, for notes, scripts and tests.
//
//   print_json_line(nlohmann::ordered_json{{"ranks", n}, {"time_us", rounded(median_us, 1)}});
//   // {"ranks":2,"time_us":21.3}
//
// ordered_json keeps the fields in the order written. rounded() (decimals) and significant()
// (significant digits) keep the digits a figure deserves instead of all seventeen.
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

namespace troupe {

inline double rounded(double value, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(value * scale) / scale;
}

// %.3g's figure: `digits` significant digits.
inline double significant(double value, int digits) {
  if (value == 0 || !std::isfinite(value)) return value;
  return rounded(value, digits - 1 - static_cast<int>(std::floor(std::log10(std::abs(value)))));
}

template <class Json>
void print_json_line(const Json& line) {
  std::cout << line.dump() << std::endl;  // flushed: ranks' output goes through the launcher's pipes
}

}  // namespace troupe
