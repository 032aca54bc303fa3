// One trace for a job: a 2-rank remote-actor run with TROUPE_TRACE set, merged by `troupe trace
// merge`: every call's arrow leaves the caller's span on rank 0 and ends in the callee's on rank 1,
// each lane's spans stay in order, a collective is a span on both ranks, and the clocks' error
// bound is printed.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <nlohmann/json.hpp>
#include <string>

#include "devices/ops.h"
#include "net/collectives.h"
#include "net/remote/remote_actor.h"
#include "support/ranks.h"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

constexpr int kCalls = 10;

struct Doubler {
  Tensor twice(const Tensor& x) { return mul(x, 2.0); }
};

}  // namespace

TEST_CASE("trace rank: remote calls recorded", "[.rank]") {
  InitOptions o;
  o.timeout = 30s;
  auto world = init_process_group(o);
  Tensor t = Tensor::ones({256});
  all_reduce(*world, t);
  RemoteActors actors(world);
  if (world->rank() == 1) {
    host("trace.doubler", std::make_shared<Doubler>(), Method{"twice", &Doubler::twice});
    CHECK_NOTHROW(serve());
    return;
  }
  RemoteActor doubler = lookup("trace.doubler", 10s);
  for (int i = 0; i < kCalls; ++i)
    CHECK(doubler.request<Tensor>("twice", Tensor::full({4}, i)).get().to_vector<float>()[0] == 2.0f * i);
}

TEST_CASE("trace: a 2-rank remote-actor run merges into one trace with matched arrows", "[net][trace]") {
  const std::string dir = (std::filesystem::temp_directory_path() / ("troupe-trace-" + std::to_string(getpid()))).string();
  std::filesystem::remove_all(dir);
  LaunchOptions o;
  o.env = {{"TROUPE_TRACE", dir}};
  RankRun run = run_ranks(2, "trace rank: remote calls recorded", o);
  check_all_passed(run, 2);
  REQUIRE(std::filesystem::exists(dir + "/rank-0.json"));
  REQUIRE(std::filesystem::exists(dir + "/rank-1.json"));

  const std::string merged = dir + "/job.json", printed = dir + "/merge.txt";
  const std::string command = std::string(TROUPE_BIN_DIR) + "/troupe trace merge " + dir + " -o " + merged + " > " + printed;
  REQUIRE(std::system(command.c_str()) == 0);
  std::ifstream said(printed);
  const std::string text((std::istreambuf_iterator<char>(said)), std::istreambuf_iterator<char>());
  INFO(text);
  CHECK_THAT(text, Catch::Contains("clock offsets to rank 0: error <= "));
  std::ifstream in(merged);
  const nlohmann::json trace = nlohmann::json::parse(in);
  const double error_us = trace["troupe"]["clock_error_us"].get<double>();
  CHECK(error_us >= 0);
  CHECK(error_us < 5000);  // one host: tens of us (what the run printed is in the INFO above)

  std::map<uint64_t, nlohmann::json> sends, receives;
  std::map<std::pair<int, int>, double> last_start;  // per lane (pid, tid)
  bool monotone = true;
  std::set<int> all_reduce_on;  // the collective's span, on every rank
  for (const auto& e : trace["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "X" && e["name"] == "all_reduce") all_reduce_on.insert(e["pid"].get<int>());
    if (ph == "X") {
      auto lane = std::make_pair(e["pid"].get<int>(), e["tid"].get<int>());
      const double ts = e["ts"];
      if (last_start.count(lane) && ts < last_start[lane]) monotone = false;
      last_start[lane] = ts;
    }
    if (e.value("cat", "") != "remote") continue;
    if (ph == "s") sends[e["id"]] = e;
    if (ph == "f") receives[e["id"]] = e;
  }
  CHECK(monotone);
  CHECK(all_reduce_on == std::set<int>{0, 1});
  CHECK(sends.size() >= kCalls);
  int matched = 0;
  for (const auto& [id, s] : sends) {
    INFO("remote call " << s.dump());
    REQUIRE(receives.count(id) == 1);  // every call's send has its receive
    const auto& f = receives[id];
    ++matched;
    CHECK(s["pid"] == 0);
    CHECK(f["pid"] == 1);
    CHECK(f["ts"].get<double>() >= s["ts"].get<double>() - error_us);  // the callee runs after the call
  }
  CHECK(matched == static_cast<int>(sends.size()));
  std::filesystem::remove_all(dir);
}
