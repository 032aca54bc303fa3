// GatherND (batch_dims = 0), as in anchors/gathernd_torch.py: gather 4096 random
// 2-d coordinates of an f32 [64,128,256] tensor, i.e. 4096 rows of 256 floats, with a naive
// per-row loop (the seed's: each coordinate read with item(), then select the row, then stack) and
// with gather_nd. Medians of single calls, run until the device is done. With --device cuda the
// seed's finding shows: each item() is a host sync (counted, devices/sync.h), gather_nd has none;
// gather_nd's bandwidth is set beside a device-to-device copy of the same bytes (clone).
//   gathernd_bench [--naive-reps 7] [--reps 200] [--device cpu|cuda] [--json]
#include <cstdio>
#include <random>

#include "devices/ops.h"
#include "devices/sync.h"
#include "examples/command_line.h"
#include "examples/cpu_kernels.h"
#include "examples/device_option.h"
#include "examples/json_line.h"
#include "examples/median_time.h"
#include "examples/run_example.h"

using namespace troupe;

namespace {

// The seed's loop: data[tuple(row)] reads each coordinate's value on the host (item()).
Tensor naive(const Tensor& data, const Tensor& indices) {
  std::vector<Tensor> rows;
  rows.reserve(static_cast<size_t>(indices.size(0)));
  for (int64_t r = 0; r < indices.size(0); ++r) {
    const Tensor row = indices.select(0, r);
    rows.push_back(data.select(0, row.select(0, 0).item<int64_t>()).select(0, row.select(0, 1).item<int64_t>()));
  }
  return stack(rows);
}

// Host syncs during one call of fn (before the timing's own wait in finish()).
template <class Fn>
uint64_t syncs_of(Fn&& fn) {
  reset_sync_counts();
  fn();
  return sync_count();
}

}  // namespace

int main(int argc, char** argv) {
  cli::App app{"GatherND: 4096 rows of 256 floats from f32[64,128,256], naive loop vs gather_nd"};
  int naive_reps = 7, reps = 50;
  bool json = false;
  std::string device_name = "cpu";
  app.add_option("--naive-reps", naive_reps, "timed calls of the naive loop")->check(cli::PositiveNumber);
  app.add_option("--reps", reps, "timed calls of gather_nd")->check(cli::PositiveNumber);
  add_device_option(app, device_name);
  app.add_flag("--json", json, "print one JSON line of figures");
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);

  return run_example("gathernd_bench", [&] {
    const Device device = example_device(device_name);
    constexpr int64_t kRows = 4096;
    std::mt19937 rng(0);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    std::vector<float> values(64 * 128 * 256);
    for (float& v : values) v = uniform(rng);
    const Tensor data = Tensor::from_vector<float>(values, {64, 128, 256}).to(device);
    std::vector<int64_t> coordinates(kRows * 2);
    for (int64_t r = 0; r < kRows; ++r) {
      coordinates[r * 2] = std::uniform_int_distribution<int64_t>(0, 63)(rng);
      coordinates[r * 2 + 1] = std::uniform_int_distribution<int64_t>(0, 127)(rng);
    }
    const Tensor indices = Tensor::from_vector<int64_t>(coordinates, {kRows, 2}).to(device);
    finish(device);  // the uploads are not timed

    if (naive(data, indices).to_vector<float>() != gather_nd(data, indices).to_vector<float>()) {
      std::fprintf(stderr, "gathernd_bench: gather_nd and the naive loop disagree\n");
      return 1;
    }
    const double naive_s = median_seconds([&] { naive(data, indices); finish(device); }, naive_reps, 1);
    // Calls queued back to back, one wait per batch: the device's time per call, not the wait's.
    constexpr int kBatch = 20;
    auto per_call = [&](auto&& call) {
      return median_seconds([&] { for (int i = 0; i < kBatch; ++i) call(); finish(device); }, reps, 1) / kBatch;
    };
    const double gather_s = per_call([&] { gather_nd(data, indices); });
    const uint64_t naive_syncs = syncs_of([&] { naive(data, indices); });
    const uint64_t gather_syncs = syncs_of([&] { gather_nd(data, indices); });
    finish(device);
    const int64_t bytes = kRows * 256 * 4 * 2;  // rows read plus rows written (the indices are 1/128 of it)
    // The yardstick: a copy of one output's bytes on the same device, which also reads and writes them.
    const Tensor block = data.reshape({-1}).slice(0, 0, kRows * 256);
    const double copy_s = per_call([&] { block.clone(); });
    const double gbs = bytes / gather_s / 1e9, copy_gbs = bytes / copy_s / 1e9;
    if (json) {
      print_json_line(with_cpu_kernels(nlohmann::ordered_json{{"device", device.str()},
                                             {"naive_ms", rounded(naive_s * 1e3, 3)},
                                             {"gather_nd_us", rounded(gather_s * 1e6, 1)},
                                             {"gbs", rounded(gbs, 2)},
                                             {"naive_syncs", naive_syncs},
                                             {"gather_nd_syncs", gather_syncs},
                                             {"bytes", bytes},
                                             {"copy_us", rounded(copy_s * 1e6, 1)},
                                             {"copy_gbs", rounded(copy_gbs, 2)},
                                             {"copy_ratio", rounded(gbs / copy_gbs, 3)}}));
    } else {
      std::printf("gathernd %lldx[256] rows on %s: naive=%.2fms (%llu host syncs) gather_nd=%.1fus (%llu host syncs)\n",
                  static_cast<long long>(kRows), device.str().c_str(), naive_s * 1e3,
                  static_cast<unsigned long long>(naive_syncs), gather_s * 1e6,
                  static_cast<unsigned long long>(gather_syncs));
      std::printf("  %lld bytes moved: gather_nd %.1f GB/s, a copy of the same bytes %.1fus %.1f GB/s (%.2fx)\n",
                  static_cast<long long>(bytes), gbs, copy_s * 1e6, copy_gbs, gbs / copy_gbs);
    }
    return 0;
  });
}
