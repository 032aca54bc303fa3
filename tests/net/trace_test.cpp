// One trace for a job: a 2-rank remote-actor run with TROUPE_TRACE set, merged by `troupe trace
// merge`: every call's arrow leaves the caller's span on rank 0 and ends in the callee's on rank 1,
// each lane's spans stay in order, a collective is a span on both ranks with its bytes and
// algorithm, a host lane's ops are a track of their rank, and the clocks' error bound is printed.
// Then 4 ranks calling round a ring: every arrow matched, every rank's collectives the same; and a
// mesh call: one span on the caller, an arrow from it to the relay on each rank it reaches.
//
// The ring is also the load of the merge's timing (a 4-rank, 60 s job):
//   TROUPE_TRACE_LOAD_SECONDS=60 build/bin/troupe launch --nproc 4 --trace /tmp/t --
//     build/bin/test_net "trace rank: a ring of remote calls"      (one command line)
//   time build/bin/troupe trace merge /tmp/t -o /tmp/t/job.json
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "devices/lane.h"
#include "devices/ops.h"
#include "net/collectives.h"
#include "net/remote/mesh.h"
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

// A host lane's ops: the track "cpu prep" of the rank's process in the merged trace.
void run_on_host_lane() {
  std::unique_ptr<Lane> lane = Lane::make(Device::cpu(), "prep");
  Tensor y;
  lane->enqueue([&] { y = relu(add(Tensor::ones({64}), Tensor::ones({64}))); });
  lane->synchronize();
  CHECK(y.to_vector<float>()[0] == 2.0f);
}

std::string temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

// Runs `troupe trace merge DIR`, returning what it printed and the merged trace.
nlohmann::json merge(const std::string& dir, std::string& printed) {
  const std::string merged = dir + "/job.json", said = dir + "/merge.txt";
  const std::string command = std::string(TROUPE_BIN_DIR) + "/troupe trace merge " + dir + " -o " + merged + " > " + said;
  REQUIRE(std::system(command.c_str()) == 0);
  std::ifstream text(said);
  printed.assign(std::istreambuf_iterator<char>(text), std::istreambuf_iterator<char>());
  std::ifstream in(merged);
  return nlohmann::json::parse(in);  // valid JSON, or this throws
}

// The merged trace (merge()) of a rank test run on `ranks` ranks, tracing into a fresh dir (then removed).
nlohmann::json traced_run(int ranks, const std::string& rank_test, const std::string& dir_name, std::string& printed) {
  const std::string dir = temp_dir(dir_name);
  LaunchOptions o;
  o.env = {{"TROUPE_TRACE", dir}};
  RankRun run = run_ranks(ranks, rank_test, o);
  check_all_passed(run, ranks);
  nlohmann::json trace = merge(dir, printed);
  std::filesystem::remove_all(dir);
  return trace;
}

// The collectives' spans per rank, in order: (name, bytes, algorithm).
using Collectives = std::map<int, std::vector<std::tuple<std::string, uint64_t, std::string>>>;

Collectives collectives_of(const nlohmann::json& trace) {
  Collectives out;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e.value("cat", "") == "collective")
      out[e["pid"].get<int>()].emplace_back(e["name"], e["args"]["bytes"].get<uint64_t>(), e["args"]["algorithm"]);
  return out;
}

// Every call's send has its receive on another rank, not before it (within the clocks' bound).
int check_arrows(const nlohmann::json& trace, double error_us) {
  std::map<uint64_t, nlohmann::json> sends, receives;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("cat", "") != "remote") continue;
    if (e["ph"] == "s") sends[e["id"]] = e;
    if (e["ph"] == "f") receives[e["id"]] = e;
  }
  int matched = 0;
  for (const auto& [id, s] : sends) {
    INFO("remote call " << s.dump());
    REQUIRE(receives.count(id) == 1);
    const auto& f = receives[id];
    CHECK(f["pid"] != s["pid"]);
    CHECK(f["ts"].get<double>() >= s["ts"].get<double>() - error_us);  // the callee runs after the call
    ++matched;
  }
  return matched;
}

// Each lane's spans in the order they started.
bool monotone(const nlohmann::json& trace) {
  std::map<std::pair<int, int>, double> last_start;  // per lane (pid, tid)
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    auto lane = std::make_pair(e["pid"].get<int>(), e["tid"].get<int>());
    const double ts = e["ts"];
    if (last_start.count(lane) && ts < last_start[lane]) return false;
    last_start[lane] = ts;
  }
  return true;
}

}  // namespace

TEST_CASE("trace rank: remote calls recorded", "[.rank]") {
  InitOptions o;
  o.timeout = 30s;
  auto world = init_process_group(o);
  Tensor t = Tensor::ones({256});
  all_reduce(*world, t);
  run_on_host_lane();
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
  const std::string dir = temp_dir("troupe-trace");
  LaunchOptions o;
  o.env = {{"TROUPE_TRACE", dir}};
  RankRun run = run_ranks(2, "trace rank: remote calls recorded", o);
  check_all_passed(run, 2);
  REQUIRE(std::filesystem::exists(dir + "/rank-0.json"));
  REQUIRE(std::filesystem::exists(dir + "/rank-1.json"));

  std::string printed;
  const nlohmann::json trace = merge(dir, printed);
  INFO(printed);
  CHECK_THAT(printed, Catch::Contains("clock offsets to rank 0: error <= "));
  const double error_us = trace["troupe"]["clock_error_us"].get<double>();
  CHECK(error_us >= 0);
  CHECK(error_us < 5000);  // one host: tens of us (what the run printed is in the INFO above)
  CHECK(monotone(trace));

  // The all_reduce: a span on both ranks, with its bytes and the algorithm that ran.
  const Collectives collectives = collectives_of(trace);
  REQUIRE(collectives.size() == 2);
  for (const auto& [rank, spans] : collectives) {
    INFO("rank " << rank);
    REQUIRE(spans.size() == 1);
    CHECK(std::get<0>(spans[0]) == "all_reduce");
    CHECK(std::get<1>(spans[0]) == 256 * 4);
    CHECK(std::get<2>(spans[0]) != "?");
    CHECK(std::get<2>(spans[0]) == std::get<2>(collectives.at(0)[0]));
  }

  // The host lane: a track of each rank's process, apart from its threads, with the lane's ops.
  std::map<int, int> lane_tid;  // rank -> tid of "cpu prep"
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == "cpu prep") lane_tid[e["pid"]] = e["tid"];
  CHECK(lane_tid.size() == 2);
  std::set<std::pair<int, std::string>> lane_ops;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && lane_tid.count(e["pid"]) && lane_tid[e["pid"]] == e["tid"]) lane_ops.emplace(e["pid"], e["name"]);
  for (int rank : {0, 1}) {
    CHECK(lane_ops.count({rank, "add"}));
    CHECK(lane_ops.count({rank, "relu"}));
  }
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name") CHECK(e["args"]["name"] == "rank " + std::to_string(e["pid"].get<int>()));

  int from_rank_0 = 0;
  for (const auto& e : trace["traceEvents"])
    if (e.value("cat", "") == "remote" && e["ph"] == "s" && e["pid"] == 0) ++from_rank_0;
  CHECK(from_rank_0 >= kCalls);
  CHECK(check_arrows(trace, error_us) >= kCalls);
  std::filesystem::remove_all(dir);
}

struct MeshDoubler {
  explicit MeshDoubler(const MeshPoint&) {}
  Tensor twice(const Tensor& x) { return mul(x, 2.0); }
};
TROUPE_ACTOR(MeshDoubler(const MeshPoint&), "trace.mesh_doubler", &MeshDoubler::twice);

TEST_CASE("trace rank: mesh calls", "[.rank]") {
  InitOptions o;
  o.timeout = 30s;
  auto world = init_process_group(o);
  RemoteActors actors(world);
  if (world->rank() != 0) {
    CHECK_NOTHROW(serve());
    return;
  }
  MeshOptions named;
  named.name = "trace.mesh";
  named.ranks = {1, 2, 3};
  Mesh mesh = spawn_mesh(named, "trace.mesh_doubler", {{"rank", 3}});
  const Tensor x = Tensor::full({4}, 1.0f);
  for (Future<Tensor>& f : mesh.call<Tensor>("twice", x)) CHECK(f.get().to_vector<float>()[0] == 2.0f);
  CHECK(wait(mesh.call_reduce(ReduceOp::sum, "twice", x)).to_vector<float>()[0] == 6.0f);
  mesh.stop();
}

TEST_CASE("trace: a mesh call is one span on the caller with an arrow to the relay of each rank", "[net][trace][mesh]") {
  std::string printed;
  const nlohmann::json trace = traced_run(4, "trace rank: mesh calls", "troupe-trace-mesh", printed);
  INFO(printed);
  // An arrow's ends sit at the start of a span of their thread: the caller's "mesh call twice",
  // and the relay's span on the rank it reaches.
  using At = std::tuple<int, int, double>;  // pid, tid, ts
  auto at = [](const nlohmann::json& e) { return At{e["pid"], e["tid"], e["ts"]}; };
  int calls = 0;  // the caller's spans, one per mesh call
  std::map<At, std::string> spans;
  std::map<uint64_t, nlohmann::json> starts, ends;  // arrows by id
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["pid"] == 0 && e["name"] == "mesh trace.mesh.twice") ++calls;
    if (e["ph"] == "X") spans[at(e)] = e["name"];
    if (e.value("cat", "") != "remote") continue;
    if (e["ph"] == "s") starts[e["id"]] = e;
    if (e["ph"] == "f") ends[e["id"]] = e;
  }
  CHECK(calls == 2);  // call and call_reduce
  std::map<int, int> reached;  // rank -> arrows from the caller's mesh calls to its relay
  for (const auto& [id, s] : starts) {
    if (spans[at(s)] != "mesh call twice") continue;
    INFO("mesh call " << s.dump());
    REQUIRE(ends.count(id) == 1);
    const int rank = ends[id]["pid"];
    CHECK(spans[at(ends[id])] == "trace.mesh.relay/" + std::to_string(rank) + " twice");
    ++reached[rank];
  }
  CHECK((reached == std::map<int, int>{{1, 2}, {2, 2}, {3, 2}}));  // each rank, from both calls
}

TEST_CASE("trace rank: a ring of remote calls", "[.rank]") {
  const char* seconds_env = std::getenv("TROUPE_TRACE_LOAD_SECONDS");
  const auto run_for = std::chrono::duration<double>(seconds_env ? std::atof(seconds_env) : 0.5);
  InitOptions o;
  o.timeout = 60s;
  auto world = init_process_group(o);
  RemoteActors actors(world);
  host("trace.ring/" + std::to_string(world->rank()), std::make_shared<Doubler>(), Method{"twice", &Doubler::twice});
  Tensor ready = Tensor::ones({16});
  all_reduce(*world, ready);  // every rank's actor is up
  RemoteActor next = lookup("trace.ring/" + std::to_string((world->rank() + 1) % world->size()), 10s);
  const Tensor x = Tensor::full({4}, 1.0f);
  std::deque<Future<Tensor>> in_flight;
  const auto start = std::chrono::steady_clock::now();
  int64_t calls = 0;
  while (std::chrono::steady_clock::now() - start < run_for) {
    for (int i = 0; i < 64; ++i, ++calls) {
      if (in_flight.size() >= 32) {
        CHECK(in_flight.front().get().to_vector<float>()[0] == 2.0f);
        in_flight.pop_front();
      }
      in_flight.push_back(next.request<Tensor>("twice", x));
    }
  }
  for (auto& f : in_flight) CHECK(f.get().to_vector<float>()[0] == 2.0f);
  Tensor done = Tensor::full({1}, static_cast<float>(calls));
  all_reduce(*world, done);  // nobody leaves while others still call it
  CHECK(done.to_vector<float>()[0] >= static_cast<float>(world->size()));
}

TEST_CASE("trace: 4 ranks calling round a ring merge with every arrow matched", "[net][trace]") {
  std::string printed;
  const nlohmann::json trace = traced_run(4, "trace rank: a ring of remote calls", "troupe-trace-ring", printed);
  INFO(printed);
  CHECK_THAT(printed, Catch::Contains("merged 4 rank(s)"));
  CHECK(monotone(trace));
  std::set<int> callers;
  for (const auto& e : trace["traceEvents"])
    if (e.value("cat", "") == "remote" && e["ph"] == "s") callers.insert(e["pid"].get<int>());
  CHECK(callers == std::set<int>{0, 1, 2, 3});
  CHECK(check_arrows(trace, trace["troupe"]["clock_error_us"].get<double>()) >= 4 * 64);
  const Collectives collectives = collectives_of(trace);
  REQUIRE(collectives.size() == 4);
  for (const auto& [rank, spans] : collectives) {
    INFO("rank " << rank);
    CHECK(spans == collectives.at(0));  // the same collectives, bytes and algorithms on every rank
    CHECK(spans.size() == 2);
  }
}
