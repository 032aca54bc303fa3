#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "actors/fork.h"
#include "actors/profiler.h"
#include "actors/runtime.h"
#include "support/two_workers.h"
#include "devices/ops.h"

using namespace troupe;

TEST_CASE("the profiler records ops, forks and tasks, and exports a Chrome trace", "[profiler]") {
  two_workers();
  Profiler& p = Profiler::global();
  p.start();
  Tensor x = Tensor::ones({4, 8});
  {
    ProfileScope scope("region");
    std::vector<Future<Tensor>> fs;
    for (int i = 0; i < 6; ++i) fs.push_back(fork([](const Tensor& t) { return relu(neg(t)); }, x));
    wait_all(fs);
  }
  p.stop();
  const std::string path = (std::filesystem::temp_directory_path() / "troupe_profiler_test_trace.json").string();
  p.export_chrome_trace(path);
  std::ifstream in(path);
  auto trace = nlohmann::json::parse(in);
  int forks = 0, tasks = 0, negs = 0, flow_starts = 0, flow_ends = 0, lanes = 0, regions = 0;
  for (auto& e : trace["traceEvents"]) {
    const std::string ph = e["ph"], name = e.value("name", "");
    if (ph == "M") ++lanes;
    if (ph == "s") ++flow_starts;
    if (ph == "f") ++flow_ends;
    if (ph != "X") continue;
    if (name == "fork") ++forks;
    if (name == "task") ++tasks;
    if (name == "region") ++regions;
    if (name == "neg") {
      ++negs;
      CHECK(e["args"]["inputs"] == "f32[4,8]");
    }
  }
  CHECK(forks == 6);
  CHECK(tasks == 6);
  CHECK(negs == 6);
  CHECK(regions == 1);
  CHECK(flow_starts == 6);
  CHECK(flow_ends == 6);
  CHECK(lanes >= 1);
  const std::string table = p.table();
  CHECK_THAT(table, Catch::Contains("neg") && Catch::Contains("relu") && Catch::Contains("Self ms"));
  // Off again: nothing more is recorded.
  const size_t before = p.event_count();
  neg(x);
  CHECK(p.event_count() == before);
}
