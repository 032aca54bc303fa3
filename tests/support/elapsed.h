#pragma once
// Seconds on the steady clock since `start`, for the tests that bound how long something took.
//
//   const auto start = std::chrono::steady_clock::now();
//   ...
//   CHECK(seconds_since(start) < 5.0);
#include <chrono>

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
