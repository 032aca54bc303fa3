#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "actors/fork.h"
#include "actors/observe/profiler.h"
#include "actors/runtime.h"
#include "support/two_workers.h"
#include "devices/backend.h"
#include "devices/lane.h"
#include "devices/ops.h"
#include "devices/sync.h"
#include "support/skip.h"

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

TEST_CASE("the profiler marks each host sync on the thread that waited", "[profiler]") {
  two_workers();
  Profiler& p = Profiler::global();
  auto lane = Lane::make(Device::cpu(), "slow");
  std::atomic<bool> release{false};
  lane->enqueue([&] {
    while (!release.load()) std::this_thread::yield();
  });
  reset_sync_counts();
  p.start();
  Event pending = lane->record();
  std::thread opener([&] { release = true; });
  pending.synchronize("the test's wait");  // a sync unless the lane was already done: then none
  opener.join();
  p.stop();
  const std::string path = (std::filesystem::temp_directory_path() / "troupe_profiler_sync_trace.json").string();
  p.export_chrome_trace(path);
  std::ifstream in(path);
  auto trace = nlohmann::json::parse(in);
  int syncs = 0;
  for (auto& e : trace["traceEvents"])
    if (e["ph"] == "i" && e["name"] == "sync") {
      ++syncs;
      CHECK(e["args"]["what"] == "the test's wait waits for cpu");
      CHECK(e["args"]["actor"] == "main");
    }
  CHECK(syncs == static_cast<int>(sync_count()));  // every counted sync is marked, and only those
  CHECK(p.table().find("sync") == std::string::npos);  // an instant, not a span of the table
}

namespace {
// The calls column of `op`'s row in a profiler table, or -1 without one.
long long calls_in(const std::string& table, const std::string& op) {
  std::istringstream rows(table);
  for (std::string row; std::getline(rows, row);) {
    std::istringstream fields(row);
    std::string name;
    long long calls = -1;
    if (fields >> name >> calls && name == op) return calls;
  }
  return -1;
}
}  // namespace

TEST_CASE("the profiler's device table sums each op's time on the lanes", "[profiler]") {
  two_workers();
  Profiler& p = Profiler::global();
  auto lane = Lane::make(Device::cpu(), "worker lane");
  const Tensor x = Tensor::ones({256, 256});
  Tensor y;
  p.start();
  neg(x);  // on this thread, no lane: not in the device table
  lane->enqueue([&] {
    Tensor t = x;
    for (int i = 0; i < 3; ++i) t = neg(t);
    y = matmul(t, x);
  });
  lane->synchronize();
  p.stop();
  const std::string table = p.device_table();
  INFO(table);
  CHECK_THAT(table, Catch::Contains("Lane ms"));
  CHECK(calls_in(table, "neg") == 3);
  CHECK(calls_in(table, "matmul") == 1);
  CHECK(table.find("matmul") < table.find("neg"));  // by time: a 256^3 product outlasts three negations
  CHECK(y.to_vector<float>()[0] == -256.0f);
}

TEST_CASE("the profiler puts ops queued on a GPU on one lane per stream", "[profiler][cuda]") {
  two_workers();
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  Profiler& p = Profiler::global();
  std::unique_ptr<Lane> lane = Lane::make(Device::cuda(0), "actor");
  Tensor x = Tensor::ones({64, 64}).to(Device::cuda(0));
  p.start();
  lane->enqueue([&] { x = relu(matmul(x, x)); });
  Tensor y = relu(x);  // the default stream, after the lane's work
  p.stop();
  const std::string path = (std::filesystem::temp_directory_path() / "troupe_profiler_gpu_trace.json").string();
  p.export_chrome_trace(path);
  std::ifstream in(path);
  auto trace = nlohmann::json::parse(in);
  std::map<int, std::string> lanes;
  std::vector<std::pair<int, std::string>> kernels;
  for (auto& e : trace["traceEvents"]) {
    if (e.value("pid", 0) != 2) continue;
    if (e["ph"] == "M" && e["name"] == "thread_name") lanes[e["tid"]] = e["args"]["name"];
    if (e["ph"] == "X") kernels.emplace_back(e["tid"].get<int>(), e["name"].get<std::string>());
  }
  CHECK(kernels.size() == 3);
  std::set<std::string> names;
  for (auto& [tid, lane_name] : lanes) names.insert(lane_name);
  CHECK(names == std::set<std::string>{"cuda:0 actor", "cuda:0 default stream"});
  const std::string table = p.device_table();
  INFO(table);
  CHECK(calls_in(table, "relu") == 2);
  CHECK(calls_in(table, "matmul") == 1);
}
