// The TorchScript fork/wait tutorial's cost: 100 forks of neg on a scalar, summed (-100), against the same
// 100 negs inline; the difference per fork is the cost of one fork/wait pair.
//   fork_overhead [--reps 2000] [--json]
#include <CLI/CLI.hpp>
#include <cstdio>

#include "actors/fork.h"
#include "actors/runtime.h"
#include "devices/ops.h"
#include "examples/json_line.h"
#include "examples/median_time.h"
#include "examples/run_example.h"

using namespace troupe;

namespace {

Tensor foo(const Tensor& x) { return neg(x); }

Tensor with_forks(const Tensor& x) {
  std::vector<Future<Tensor>> futures;
  futures.reserve(100);
  for (int i = 0; i < 100; ++i) futures.push_back(fork(foo, x));
  return sum(stack(wait_all(futures)));
}

Tensor inline_calls(const Tensor& x) {
  std::vector<Tensor> results;
  results.reserve(100);
  for (int i = 0; i < 100; ++i) results.push_back(foo(x));
  return sum(stack(results));
}

// Median over rounds of the mean time of `reps` calls, in seconds.
template <class Fn>
double median_time(Fn fn, int reps, int rounds) {
  return median_seconds([&] { for (int i = 0; i < reps; ++i) fn(); }, rounds) / reps;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fork/wait overhead: the TorchScript fork/wait tutorial's 100 forks of neg"};
  int reps = 2000, rounds = 7;
  bool json = false;
  app.add_option("--reps", reps, "calls per timing round")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "timing rounds (the median is reported)")->check(CLI::PositiveNumber);
  app.add_flag("--json", json, "print one JSON line of figures");
  CLI11_PARSE(app, argc, argv);

  return run_example("fork_overhead", [&] {
    Runtime runtime;
    Tensor x = Tensor::ones({});
    const double result = with_forks(x).item<double>();
    if (result != -100.0 || inline_calls(x).item<double>() != -100.0) {
      std::fprintf(stderr, "fork_overhead: wrong result %g (expected -100)\n", result);
      return 1;
    }
    for (int i = 0; i < 200; ++i) with_forks(x), inline_calls(x);  // warm up
    const double forked = median_time([&] { with_forks(x); }, reps, rounds);
    const double inlined = median_time([&] { inline_calls(x); }, reps, rounds);
    const double per_fork_us = (forked - inlined) / 100 * 1e6;
    if (json) {
      print_json_line(nlohmann::ordered_json{{"result", result},
                                             {"fork100_us", rounded(forked * 1e6, 2)},
                                             {"inline100_us", rounded(inlined * 1e6, 2)},
                                             {"per_fork_us", rounded(per_fork_us, 3)}});
    } else {
      std::printf("result %g (%s)\n100 forks: %.1f us  inline: %.1f us  per fork/wait: %.3f us\n", result,
                  runtime.describe().c_str(), forked * 1e6, inlined * 1e6, per_fork_us);
    }
    return 0;
  });
}
