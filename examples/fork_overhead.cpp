// The TorchScript fork/wait tutorial's cost: 100 forks of neg on a scalar, summed (-100), against the same
// 100 negs inline; the difference per fork is the cost of one fork/wait pair.
//   fork_overhead [--reps 2000] [--json]
//   fork_overhead --metrics-ab [--reps 5000]   # what always-on metrics cost a fork/wait pair
// --metrics-ab times 100 forks --reps times with metrics on and as often off (metrics::set_enabled),
// alternating call by call in one process so the machine's load drifts alike over both, and
// reports the medians.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "actors/fork.h"
#include "actors/observe/metrics.h"
#include "actors/runtime.h"
#include "devices/ops.h"
#include "examples/command_line.h"
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
  cli::App app{"fork/wait overhead: the TorchScript fork/wait tutorial's 100 forks of neg"};
  int reps = 2000, rounds = 7;
  bool json = false, metrics_ab = false;
  app.add_option("--reps", reps, "calls per timing round")->check(cli::PositiveNumber);
  app.add_option("--rounds", rounds, "timing rounds (the median is reported)")->check(cli::PositiveNumber);
  app.add_flag("--json", json, "print one JSON line of figures");
  app.add_flag("--metrics-ab", metrics_ab, "metrics on against off, alternate calls (--reps each)");
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);

  return run_example("fork_overhead", [&] {
    Runtime runtime;
    Tensor x = Tensor::ones({});
    const double result = with_forks(x).item<double>();
    if (result != -100.0 || inline_calls(x).item<double>() != -100.0) {
      std::fprintf(stderr, "fork_overhead: wrong result %g (expected -100)\n", result);
      return 1;
    }
    for (int i = 0; i < 200; ++i) with_forks(x), inline_calls(x);  // warm up
    if (metrics_ab) {
      std::vector<double> on, off;
      for (int r = 0; r < 2 * reps; ++r) {
        metrics::set_enabled(r % 2 == 0);
        (r % 2 == 0 ? on : off).push_back(median_time([&] { with_forks(x); }, 1, 1));
      }
      std::sort(on.begin(), on.end());
      std::sort(off.begin(), off.end());
      const double on_us = on[on.size() / 2] * 1e6, off_us = off[off.size() / 2] * 1e6;
      // The hook itself (a fork counts one task): a counter's add, on and off, 10^7 in a row.
      metrics::Counter& probe = metrics::counter("troupe_fork_overhead_probe_total", "fork_overhead --metrics-ab");
      double add_ns[2];
      for (int enabled = 0; enabled < 2; ++enabled) {
        metrics::set_enabled(enabled == 1);
        add_ns[enabled] = median_time([&] { probe.add(); }, 10'000'000, 5) * 1e9;
      }
      metrics::set_enabled(true);
      print_json_line(nlohmann::ordered_json{{"fork100_metrics_on_us", rounded(on_us, 2)},
                                             {"fork100_metrics_off_us", rounded(off_us, 2)},
                                             {"metrics_ns_per_fork", rounded((on_us - off_us) * 10, 1)},
                                             {"counter_add_on_ns", rounded(add_ns[1], 2)},
                                             {"counter_add_off_ns", rounded(add_ns[0], 2)}});
      return 0;
    }
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
