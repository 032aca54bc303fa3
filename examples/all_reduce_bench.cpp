// all_reduce latency and bus bandwidth across the ranks of a job, side by side with the Gloo
// anchor (/work/shared/anchors/allreduce_gloo.py). Rank 0 prints one row (or JSON line) per size.
//
//   build/bin/troupe launch --nproc 2 -- build/bin/all_reduce_bench [--sizes 4,4096] [--op sum] [--json]
//   {"ranks":2,"bytes":4,"time_us":21.3,"busbw_gbs":0.0004}
//
// busbw = bytes / time * 2(n-1)/n, as nccl-tests define it. Each size: two warm-up calls (as the
// anchor makes, or --warmup), a barrier, then `reps` timed calls (as many as the anchor makes, or
// --reps); the median is reported.
// --collective broadcast times a broadcast from rank 0 followed by a barrier instead (the root
// may return before the others have the data); busbw = bytes / time. --collective all_gather times
// an all_gather of `bytes` from every rank; busbw = bytes * (n-1) / time (what each rank receives).
//
// On paper (all_reduce_model.h): --fit also prints alpha and beta read off the smallest and the
// largest size; --model N (no ranks needed) prints the predicted all_reduce time of the ring, the
// tree and two levels at 2, 4, ... N ranks, and the ring/tree crossover, from --alpha-us and --gbs
// (the network) and --host-alpha-us, --host-gbs, --per-host (within a host).
//   build/bin/all_reduce_bench --model 1024 --alpha-us 60 --gbs 1.2 --host-alpha-us 10 --host-gbs 8 --per-host 8
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "net/collectives.h"
#include "examples/all_reduce_model.h"
#include "examples/command_line.h"
#include "examples/json_line.h"
#include "examples/run_example.h"

int main(int argc, char** argv) {
  using namespace troupe;
  using namespace troupe::net;
  std::vector<int64_t> sizes = {4, 4096, 1 << 20, 16 << 20, 64 << 20};
  std::string op_name = "sum", collective = "all_reduce";
  bool json = false;
  cli::App app{"all_reduce latency and bus bandwidth"};
  app.add_option("--sizes", sizes, "message sizes in bytes (f32 elements = bytes / 4)")->delimiter(',');
  app.add_option("--op", op_name, "sum, product, max, min or avg")
      ->check(cli::IsMember({"sum", "product", "max", "min", "avg"}));
  app.add_option("--collective", collective, "all_reduce, broadcast or all_gather")
      ->check(cli::IsMember({"all_reduce", "broadcast", "all_gather"}));
  app.add_flag("--json", json, "one JSON line per size instead of a table");
  int reps_asked = 0;
  app.add_option("--reps", reps_asked, "timed calls per size (default: about 200 MB moved, 3 to 200)")
      ->check(cli::PositiveNumber);
  int warmup = 2;
  app.add_option("--warmup", warmup, "untimed calls per size before the timed ones (the first checks the sum)")
      ->check(cli::PositiveNumber);
  bool fit_model = false;
  int model_ranks = 0, per_host = 8;
  double alpha_us = 60, gbs = 1, host_alpha_us = 10, host_gbs = 8;
  app.add_flag("--fit", fit_model, "also print alpha and beta fitted from the smallest and largest size");
  app.add_option("--model", model_ranks, "predict up to N ranks instead of measuring")->check(cli::Range(2, 1 << 20));
  app.add_option("--alpha-us", alpha_us, "--model: network latency per message, us");
  app.add_option("--gbs", gbs, "--model: network bandwidth, GB/s");
  app.add_option("--host-alpha-us", host_alpha_us, "--model: latency within a host, us");
  app.add_option("--host-gbs", host_gbs, "--model: bandwidth within a host, GB/s");
  app.add_option("--per-host", per_host, "--model: ranks per host for two levels")->check(cli::PositiveNumber);
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
  if (model_ranks > 0) {
    const AlphaBeta network{alpha_us * 1e-6, 1 / (gbs * 1e9)}, host{host_alpha_us * 1e-6, 1 / (host_gbs * 1e9)};
    std::printf("alpha-beta model: network %.1f us, %.2f GB/s; host %.1f us, %.2f GB/s, %d ranks per host\n", alpha_us,
                gbs, host_alpha_us, host_gbs, per_host);
    std::printf("%6s %10s %12s %12s %12s  %s\n", "ranks", "bytes", "ring_us", "tree_us", "2level_us", "ring beats tree above");
    for (int p = 2; p <= model_ranks; p *= 2)
      for (int64_t bytes : sizes) {
        const double m = static_cast<double>(bytes);
        const int hosts = p / per_host;  // two levels once there are 2 hosts
        const double crossover = ring_tree_crossover_bytes(network, p);
        const std::string two_level =
            hosts >= 2 ? std::to_string(std::lround(two_level_seconds(network, host, hosts, per_host, m) * 1e6)) : "-";
        const std::string above = std::isinf(crossover) ? "never" : std::to_string(std::llround(crossover)) + " bytes";
        std::printf("%6d %10lld %12.0f %12.0f %12s  %s\n", p, static_cast<long long>(bytes),
                    ring_seconds(network, p, m) * 1e6, tree_seconds(network, p, m) * 1e6, two_level.c_str(),
                    above.c_str());
      }
    return 0;
  }
  return troupe::run_example("all_reduce_bench", [&] {
    const ReduceOp op = op_name == "sum"       ? ReduceOp::sum
                        : op_name == "product" ? ReduceOp::product
                        : op_name == "max"     ? ReduceOp::max
                        : op_name == "min"     ? ReduceOp::min
                                               : ReduceOp::avg;

    auto world = init_process_group();
    const int n = world->size();
    std::vector<std::pair<int64_t, double>> measured;  // bytes, median seconds
    if (world->rank() == 0 && !json) std::printf("%6s %12s %12s %12s\n", "ranks", "bytes", "time_us", "busbw_GB/s");
    for (int64_t bytes : sizes) {
      const Tensor input = Tensor::ones({std::max<int64_t>(1, bytes / 4)});
      const int64_t reps_by_size = std::clamp<int64_t>(200'000'000 / std::max<int64_t>(bytes, 1), 3, 200);
      const int reps = reps_asked > 0 ? reps_asked : static_cast<int>(reps_by_size);
      for (int i = 0; i < warmup; ++i) {
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
        } else if (collective == "all_gather") {
          std::vector<Tensor> parts;
          all_gather(*world, parts, t);
        } else {
          all_reduce(*world, t, op);
        }
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
      }
      std::nth_element(us.begin(), us.begin() + reps / 2, us.end());
      const double median = us[static_cast<size_t>(reps / 2)];
      measured.emplace_back(bytes, median * 1e-6);
      const double busbw =
          static_cast<double>(bytes) / (median * 1e-6) *
          (collective == "broadcast" ? 1.0 : collective == "all_gather" ? n - 1.0 : 2.0 * (n - 1) / n) / 1e9;
      if (world->rank() != 0) continue;
      if (json)
        print_json_line(nlohmann::ordered_json{
            {"collective", collective}, {"ranks", n}, {"bytes", bytes}, {"time_us", rounded(median, 1)}, {"busbw_gbs", rounded(busbw, 4)}});
      else
        std::printf("%6d %12lld %12.1f %12.3f\n", n, static_cast<long long>(bytes), median, busbw);
      std::fflush(stdout);
    }
    if (fit_model && world->rank() == 0 && measured.size() >= 2 && n >= 2) {
      const auto [tiny, large] = std::minmax_element(measured.begin(), measured.end());
      const AlphaBeta c = fit(n, tiny->second, static_cast<double>(large->first), large->second);
      print_json_line(nlohmann::ordered_json{{"fit_ranks", n},
                                             {"alpha_us", rounded(c.alpha * 1e6, 1)},
                                             {"gbs", rounded(c.beta > 0 ? 1 / c.beta / 1e9 : 0, 3)}});
    }
    barrier(*world);
    return 0;
  });
}
