// GatherND (batch_dims = 0), as in anchors/gathernd_torch.py: gather 4096 random
// 2-d coordinates of an f32 [64,128,256] tensor, i.e. 4096 rows of 256 floats, with a naive
// per-row loop (select each row, then stack) and with gather_nd. Medians of single calls.
//   gathernd_bench [--naive-reps 7] [--reps 200] [--json]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <random>

#include "devices/ops.h"
#include "examples/json_line.h"
#include "examples/median_time.h"
#include "examples/run_example.h"

using namespace troupe;

namespace {

Tensor naive(const Tensor& data, const Tensor& indices) {
  const std::vector<int64_t> idx = indices.to_vector<int64_t>();
  std::vector<Tensor> rows;
  rows.reserve(idx.size() / 2);
  for (size_t r = 0; r < idx.size(); r += 2) rows.push_back(data.select(0, idx[r]).select(0, idx[r + 1]));
  return stack(rows);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GatherND: 4096 rows of 256 floats from f32[64,128,256], naive loop vs gather_nd"};
  int naive_reps = 7, reps = 200;
  bool json = false;
  app.add_option("--naive-reps", naive_reps, "timed calls of the naive loop")->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "timed calls of gather_nd")->check(CLI::PositiveNumber);
  app.add_flag("--json", json, "print one JSON line of figures");
  CLI11_PARSE(app, argc, argv);

  return run_example("gathernd_bench", [&] {
    constexpr int64_t kRows = 4096;
    std::mt19937 rng(0);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    std::vector<float> values(64 * 128 * 256);
    for (float& v : values) v = uniform(rng);
    const Tensor data = Tensor::from_vector<float>(values, {64, 128, 256});
    std::vector<int64_t> coordinates(kRows * 2);
    for (int64_t r = 0; r < kRows; ++r) {
      coordinates[r * 2] = std::uniform_int_distribution<int64_t>(0, 63)(rng);
      coordinates[r * 2 + 1] = std::uniform_int_distribution<int64_t>(0, 127)(rng);
    }
    const Tensor indices = Tensor::from_vector<int64_t>(coordinates, {kRows, 2});

    if (naive(data, indices).to_vector<float>() != gather_nd(data, indices).to_vector<float>()) {
      std::fprintf(stderr, "gathernd_bench: gather_nd and the naive loop disagree\n");
      return 1;
    }
    const double naive_s = median_seconds([&] { naive(data, indices); }, naive_reps, 1);
    const double gather_s = median_seconds([&] { gather_nd(data, indices); }, reps, 1);
    const double gb = kRows * 256 * 4 * 2 / 1e9;  // bytes read plus bytes written
    if (json) {
      print_json_line(nlohmann::ordered_json{{"naive_ms", rounded(naive_s * 1e3, 3)},
                                             {"gather_nd_us", rounded(gather_s * 1e6, 1)},
                                             {"gbs", rounded(gb / gather_s, 2)}});
    } else {
      std::printf("gathernd %lldx[256] rows: naive=%.2fms gather_nd=%.0fus (%.1f GB/s moved)\n",
                  static_cast<long long>(kRows), naive_s * 1e3, gather_s * 1e6, gb / gather_s);
    }
    return 0;
  });
}
