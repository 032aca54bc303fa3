// The distributed tutorial's hand-written ring all-reduce (net/seed_ring_all_reduce.h, only p2p
// isend/recv), checked against the library's all_reduce on the same tensor and timed side by side.
//
//   build/bin/troupe launch --nproc 2 -- build/bin/ring_all_reduce [--elements 4194304] [--reps 5]
//   [rank 0] seed ring: 41250.3 us, library all_reduce: 14250.1 us (median of 5), results agree
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "net/collectives.h"
#include "net/seed_ring_all_reduce.h"
#include "examples/command_line.h"
#include "examples/run_example.h"

int main(int argc, char** argv) {
  using namespace troupe;
  int64_t elements = 1 << 22;
  int reps = 5;
  cli::App app{"the distributed tutorial's ring all-reduce next to the library's"};
  app.add_option("--elements", elements, "f32 elements per rank")->check(cli::PositiveNumber);
  app.add_option("--reps", reps, "timed repetitions (median reported)")->check(cli::Range(1, 1000));
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
  return troupe::run_example("ring_all_reduce", [&] {
    auto world = net::init_process_group();
    const int rank = world->rank();
    // Each rank contributes rank + 1 + (i mod 7): small integers, so both sums are exact.
    std::vector<float> values(static_cast<size_t>(elements));
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(rank + 1 + static_cast<int>(i % 7));
    const Tensor input = Tensor::from_vector<float>(values, {elements});

    auto median_us = [&](auto&& fn) {
      std::vector<double> us;
      for (int i = 0; i < reps; ++i) {
        net::barrier(*world);
        const auto start = std::chrono::steady_clock::now();
        fn();
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
      }
      std::nth_element(us.begin(), us.begin() + reps / 2, us.end());
      return us[static_cast<size_t>(reps / 2)];
    };
    Tensor seed = input, library = input;
    const double seed_us = median_us([&] {
      seed = input;
      net::seed_ring_all_reduce(*world, seed);
    });
    const double library_us = median_us([&] {
      library = input;
      net::all_reduce(*world, library, net::ReduceOp::sum);
    });
    const bool agree = seed.to_vector<float>() == library.to_vector<float>();
    std::printf("seed ring: %.1f us, library all_reduce: %.1f us (median of %d), results %s\n", seed_us, library_us,
                reps, agree ? "agree" : "DIFFER");
    return agree ? 0 : 1;
  });
}
