// Real processes on loopback, started by the launcher: p2p with 2 and 4 ranks, init methods,
// timeouts, kill -9 of a rank, CURVE, the collectives' channel, and the launcher itself.
#include <unistd.h>

#include <csignal>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <mutex>

#include "net/launcher.h"

using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

struct Job {
  LaunchResult result;
  std::vector<std::string> lines;  // "[rank R] line", stdout and stderr together
  double seconds = 0;
  std::string text() const {
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
  }
  int count(const std::string& part) const {
    int n = 0;
    for (const auto& l : lines) n += l.find(part) != std::string::npos;
    return n;
  }
};

Job run(int nproc, std::vector<std::string> args, LaunchOptions options = {}) {
  options.nproc = nproc;
  options.command = {std::string(TROUPE_BIN_DIR) + "/net_worker"};
  options.command.insert(options.command.end(), args.begin(), args.end());
  if (options.grace == std::chrono::milliseconds(5000)) options.grace = 2s;
  Job job;
  std::mutex mutex;
  options.on_line = [&](int rank, bool, const std::string& line) {
    std::lock_guard lock(mutex);
    job.lines.push_back("[rank " + std::to_string(rank) + "] " + line);
  };
  const auto start = std::chrono::steady_clock::now();
  job.result = launch(options);
  job.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return job;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("troupe-test-" + std::to_string(::getpid()) + "-" + name)).string();
}

}  // namespace

TEST_CASE("multiprocess: blocking and non-blocking p2p, 2 and 4 ranks", "[net][p2p]") {
  for (int n : {2, 4}) {
    Job job = run(n, {"p2p"});
    INFO(job.text());
    CHECK(job.result.exit_code == 0);
    CHECK(job.count("ok p2p rank") == n);
  }
}

TEST_CASE("multiprocess: p2p over tcp only", "[net][p2p]") {
  LaunchOptions o;
  o.env = {{"TROUPE_TRANSPORT", "tcp"}};
  Job job = run(2, {"p2p"}, o);
  INFO(job.text());
  CHECK(job.result.exit_code == 0);
  CHECK(job.count("ok p2p rank") == 2);
}

TEST_CASE("multiprocess: init methods tcp:// and file://", "[net][init]") {
  Job tcp = run(2, {"init", "tcp://127.0.0.1:" + std::to_string(free_tcp_port())});
  INFO(tcp.text());
  CHECK(tcp.result.exit_code == 0);
  CHECK(tcp.count("ok p2p rank") == 2);

  const std::string file = temp_path("rendezvous");
  std::filesystem::remove(file);
  Job shared = run(4, {"init", "file://" + file});
  INFO(shared.text());
  CHECK(shared.result.exit_code == 0);
  CHECK(shared.count("ok p2p rank") == 4);
  std::filesystem::remove(file);
}

TEST_CASE("multiprocess: rendezvous timeouts name the missing rank", "[net][init]") {
  // Two ranks start, three are expected: rank 2 never comes.
  Job env = run(2, {"rendezvous_timeout"});
  INFO(env.text());
  CHECK(env.result.exit_code == 0);
  CHECK(env.count("ok rendezvous_timeout") == 2);
  CHECK(env.count("rank(s) 2 did not register") == 2);

  const std::string file = temp_path("rendezvous-timeout");
  std::filesystem::remove(file);
  Job shared = run(2, {"rendezvous_timeout", "file://" + file});
  INFO(shared.text());
  CHECK(shared.result.exit_code == 0);
  CHECK(shared.count("rank(s) 2 did not register") == 2);
  std::filesystem::remove(file);
}

TEST_CASE("multiprocess: operation timeouts", "[net][timeout]") {
  Job job = run(2, {"timeouts"});
  INFO(job.text());
  CHECK(job.result.exit_code == 0);
  CHECK(job.count("ok timeouts rank") == 2);
}

TEST_CASE("multiprocess: kill -9 of a rank fails every survivor with PeerLostError within 5 s", "[net][failure]") {
  LaunchOptions o;
  o.stop_on_failure = false;  // let the survivors report
  Job job = run(4, {"kill"}, o);
  INFO(job.text());
  REQUIRE(job.result.ranks.size() == 4);
  CHECK(job.result.ranks[1].signal == 9);
  CHECK(job.result.failure.find("rank 1") != std::string::npos);
  for (int r : {0, 2, 3}) CHECK(job.result.ranks[r].exit_code == 0);
  CHECK(job.count("ok survivor rank") == 3);
  CHECK(job.seconds < 15);
}

TEST_CASE("multiprocess: CURVE on, forged frames from keyless processes never arrive", "[net][curve]") {
  LaunchOptions o;
  o.curve = true;
  Job job = run(2, {"curve"}, o);
  INFO(job.text());
  CHECK(job.result.exit_code == 0);
  CHECK(job.count("ok curve rank") == 2);
}

TEST_CASE("multiprocess: the collectives' channel detects mismatched calls on both ranks", "[net][channel]") {
  Job job = run(2, {"channel"});
  INFO(job.text());
  CHECK(job.result.exit_code == 0);
  CHECK(job.count("ok channel rank") == 2);
}

TEST_CASE("launcher: environment, prefixed output, exit codes", "[net][launch]") {
  LaunchOptions o;
  o.nproc = 3;
  o.command = {"sh", "-c", "echo $RANK/$WORLD_SIZE/$LOCAL_RANK $MASTER_ADDR; echo err >&2; printf tail"};
  std::vector<std::string> out;
  std::mutex mutex;
  o.on_line = [&](int rank, bool is_stderr, const std::string& line) {
    std::lock_guard lock(mutex);
    out.push_back(std::to_string(rank) + (is_stderr ? " E " : " O ") + line);
  };
  LaunchResult r = launch(o);
  CHECK(r.exit_code == 0);
  CHECK(r.failure.empty());
  for (int rank = 0; rank < 3; ++rank) {
    const std::string mine = std::to_string(rank) + " O " + std::to_string(rank) + "/3/" + std::to_string(rank) +
                             " 127.0.0.1";
    CHECK(std::count(out.begin(), out.end(), mine) == 1);
    CHECK(std::count(out.begin(), out.end(), std::to_string(rank) + " E err") == 1);
    CHECK(std::count(out.begin(), out.end(), std::to_string(rank) + " O tail") == 1);  // unterminated last line
  }

  // Multi-node numbering: node 1 of 2 with 2 ranks each holds ranks 2 and 3.
  o.nproc = 2;
  o.nnodes = 2;
  o.node_rank = 1;
  o.master = "127.0.0.1:29999";
  o.command = {"sh", "-c", "echo $RANK/$WORLD_SIZE/$MASTER_PORT/$NODE_RANK"};
  out.clear();
  CHECK(launch(o).exit_code == 0);
  CHECK(std::count(out.begin(), out.end(), "2 O 2/4/29999/1") == 1);
  CHECK(std::count(out.begin(), out.end(), "3 O 3/4/29999/1") == 1);
}

TEST_CASE("launcher: a failed rank stops the others and is named", "[net][launch]") {
  LaunchOptions o;
  o.nproc = 3;
  o.grace = 1s;
  o.on_line = [](int, bool, const std::string&) {};
  o.command = {"sh", "-c", "if [ $RANK = 1 ]; then sleep 0.2; exit 3; fi; exec sleep 30"};
  auto start = std::chrono::steady_clock::now();
  LaunchResult r = launch(o);
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.failure, Catch::Contains("rank 1") && Catch::Contains("exited with status 3"));
  CHECK(r.ranks[0].signal == SIGTERM);
  CHECK(r.ranks[2].signal == SIGTERM);

  // A rank ignoring SIGTERM gets SIGKILL after the grace period.
  o.command = {"sh", "-c", "if [ $RANK = 0 ]; then kill -9 $$; fi; trap '' TERM; exec sleep 30"};
  start = std::chrono::steady_clock::now();
  r = launch(o);
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  CHECK(r.exit_code == 128 + 9);
  CHECK_THAT(r.failure, Catch::Contains("rank 0") && Catch::Contains("signal 9"));

  o.command = {"/nonexistent/program"};
  r = launch(o);
  CHECK(r.exit_code == 127);

  auto bad = [](int nproc, int nnodes, int node_rank, std::vector<std::string> command) {
    LaunchOptions b;
    b.nproc = nproc;
    b.nnodes = nnodes;
    b.node_rank = node_rank;
    b.command = std::move(command);
    return b;
  };
  CHECK_THROWS_WITH(launch(bad(0, 1, 0, {"true"})), Catch::Contains("--nproc"));
  CHECK_THROWS_WITH(launch(bad(1, 1, 0, {})), Catch::Contains("no program"));
  CHECK_THROWS_WITH(launch(bad(1, 2, 0, {"true"})), Catch::Contains("--master"));
  CHECK_THROWS_WITH(launch(bad(1, 2, 2, {"true"})), Catch::Contains("--node-rank 2"));
}
