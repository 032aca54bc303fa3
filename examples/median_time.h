#pragma once
// Benchmarks quote medians: these machines are noisy, and a median ignores the odd slow run.
//
//   double s = troupe::median_seconds([&] { model(x); }, /*reps=*/5, /*warmups=*/2);
#include <algorithm>
#include <chrono>
#include <vector>

namespace troupe {

// Median wall time of `reps` timed calls of fn, in seconds, after `warmups` untimed calls.
template <class Fn>
double median_seconds(Fn&& fn, int reps, int warmups = 0) {
  for (int i = 0; i < warmups; ++i) fn();
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace troupe
