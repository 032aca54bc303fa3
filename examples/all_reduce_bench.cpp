// all_reduce latency and bus bandwidth across the ranks of a job, side by side with the Gloo
// anchor (/work/shared/anchors/allreduce_gloo.py). Rank 0 prints one row (or JSON line) per size.
//
//   build/bin/troupe launch --nproc 2 -- build/bin/all_reduce_bench [--sizes 4,4096] [--op sum] [--json]
//   {"ranks":2,"bytes":4,"time_us":21.3,"busbw_gbs":0.0004}
//
// busbw = bytes / time * 2(n-1)/n, as nccl-tests define it. Each size: two warm-up calls, a
// barrier, then `reps` timed calls (as many as the anchor makes); the median is reported.
// --collective broadcast times a broadcast from rank 0 followed by a barrier instead (the root
// may return before the others have the data); busbw = bytes / time.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "net/collectives.h"
#include "examples/json_line.h"
#include "examples/run_example.h"

int main(int argc, char** argv) {
  using namespace troupe;
  using namespace troupe::net;
  std::vector<int64_t> sizes = {4, 4096, 1 << 20, 16 << 20, 64 << 20};
  std::string op_name = "sum", collective = "all_reduce";
  bool json = false;
  CLI::App app{"all_reduce latency and bus bandwidth"};
  app.add_option("--sizes", sizes, "message sizes in bytes (f32 elements = bytes / 4)")->delimiter(',');
  app.add_option("--op", op_name, "sum, product, max, min or avg")
      ->check(CLI::IsMember({"sum", "product", "max", "min", "avg"}));
  app.add_option("--collective", collective, "all_reduce or broadcast")->check(CLI::IsMember({"all_reduce", "broadcast"}));
  app.add_flag("--json", json, "one JSON line per size instead of a table");
  CLI11_PARSE(app, argc, argv);
  return troupe::run_example("all_reduce_bench", [&] {
    const ReduceOp op = op_name == "sum"       ? ReduceOp::sum
                        : op_name == "product" ? ReduceOp::product
                        : op_name == "max"     ? ReduceOp::max
                        : op_name == "min"     ? ReduceOp::min
                                               : ReduceOp::avg;

    auto world = init_process_group();
    const int n = world->size();
    if (world->rank() == 0 && !json) std::printf("%6s %12s %12s %12s\n", "ranks", "bytes", "time_us", "busbw_GB/s");
    for (int64_t bytes : sizes) {
      const Tensor input = Tensor::ones({std::max<int64_t>(1, bytes / 4)});
      const int reps = static_cast<int>(std::clamp<int64_t>(200'000'000 / std::max<int64_t>(bytes, 1), 3, 200));
      for (int i = 0; i < 2; ++i) {
        Tensor t = input;
        all_reduce(*world, t, op);
        if (i == 0 && op == ReduceOp::sum && t.to_vector<float>()[0] != static_cast<float>(n)) {
          std::fprintf(stderr, "all_reduce gave %g, expected %d\n", t.to_vector<float>()[0], n);
          return 1;
        }
      }
      barrier(*world);
      std::vector<double> us;
      for (int i = 0; i < reps; ++i) {
        Tensor t = input;  // the result is a fresh tensor: the input stays ones
        const auto start = std::chrono::steady_clock::now();
        if (collective == "broadcast") {
          broadcast(*world, t, 0);
          barrier(*world);
        } else {
          all_reduce(*world, t, op);
        }
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
      }
      std::nth_element(us.begin(), us.begin() + reps / 2, us.end());
      const double median = us[static_cast<size_t>(reps / 2)];
      const double busbw =
          static_cast<double>(bytes) / (median * 1e-6) * (collective == "broadcast" ? 1.0 : 2.0 * (n - 1) / n) / 1e9;
      if (world->rank() != 0) continue;
      if (json)
        print_json_line(nlohmann::ordered_json{
            {"collective", collective}, {"ranks", n}, {"bytes", bytes}, {"time_us", rounded(median, 1)}, {"busbw_gbs", rounded(busbw, 4)}});
      else
        std::printf("%6d %12lld %12.1f %12.3f\n", n, static_cast<long long>(bytes), median, busbw);
      std::fflush(stdout);
    }
    barrier(*world);
    return 0;
  });
}
