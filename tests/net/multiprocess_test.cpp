// Real processes on loopback, started by the launcher: p2p with 2 and 4 ranks, init methods,
// timeouts, kill -9 of a rank, the job secret, the collectives' channel (the ranks: multiprocess_ranks.cpp),
// and the launcher itself.
#include <unistd.h>

#include <csignal>
#include <cstdio>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <set>

#include "net/bootstrap/launcher.h"
#include "net/job_secret.h"
#include "support/ranks.h"

using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("troupe-test-" + std::to_string(::getpid()) + "-" + name)).string();
}

LaunchOptions with_env(std::vector<std::pair<std::string, std::string>> env) {
  LaunchOptions o;
  o.env = std::move(env);
  return o;
}

}  // namespace

TEST_CASE("multiprocess: blocking and non-blocking p2p, 2 and 4 ranks", "[net][p2p]") {
  for (int n : {2, 4}) {
    RankRun run = run_ranks(n, "net rank: p2p");
    check_all_passed(run, n);
  }
}

TEST_CASE("multiprocess: the ranks of one host that fit its CPUs wait on CPUs of their own", "[net][p2p]") {
  for (int n : {2, 3}) {
    RankRun run = run_ranks(n, "net rank: home cpus");
    check_all_passed(run, n);
  }
}

TEST_CASE("multiprocess: p2p over tcp only", "[net][p2p]") {
  RankRun run = run_ranks(2, "net rank: p2p", with_env({{"TROUPE_TRANSPORT", "tcp"}}));
  check_all_passed(run, 2);
}

TEST_CASE("multiprocess: init methods tcp:// and file://", "[net][init]") {
  const std::string tcp_method = "tcp://127.0.0.1:" + std::to_string(free_tcp_port());
  RankRun tcp = run_ranks(2, "net rank: p2p", with_env({{"TROUPE_TEST_INIT_METHOD", tcp_method}}));
  check_all_passed(tcp, 2);

  const std::string file = temp_path("rendezvous");
  std::filesystem::remove(file);
  RankRun shared = run_ranks(4, "net rank: p2p", with_env({{"TROUPE_TEST_INIT_METHOD", "file://" + file}}));
  check_all_passed(shared, 4);
  std::filesystem::remove(file);
}

TEST_CASE("multiprocess: rendezvous timeouts name the missing rank", "[net][init]") {
  // Two ranks start, three are expected: rank 2 never comes.
  RankRun env = run_ranks(2, "net rank: rendezvous timeout");
  check_all_passed(env, 2);

  const std::string file = temp_path("rendezvous-timeout");
  std::filesystem::remove(file);
  RankRun shared = run_ranks(2, "net rank: rendezvous timeout", with_env({{"TROUPE_TEST_INIT_METHOD", "file://" + file}}));
  check_all_passed(shared, 2);
  std::filesystem::remove(file);
}

TEST_CASE("multiprocess: operation timeouts", "[net][timeout]") {
  RankRun run = run_ranks(2, "net rank: timeouts");
  check_all_passed(run, 2);
}

TEST_CASE("multiprocess: kill -9 of a rank fails every survivor with PeerLostError within 5 s", "[net][failure]") {
  LaunchOptions o;
  o.stop_on_failure = false;  // let the survivors report
  RankRun run = run_ranks(4, "net rank: kill", o);
  INFO(run.output);
  REQUIRE(run.result.ranks.size() == 4);
  CHECK(run.result.ranks[1].signal == 9);
  CHECK(run.result.failure.find("rank 1") != std::string::npos);
  for (int r : {0, 2, 3}) CHECK(run.result.ranks[r].exit_code == 0);
  CHECK(run.passed_ranks() == 3);
  CHECK(run.seconds < 15);
}

TEST_CASE("multiprocess: the job secret by default, strangers and wrong secrets never get a frame in",
          "[net][secret]") {
  RankRun run = run_ranks(2, "net rank: secret");
  check_all_passed(run, 2);
  // One line on the rank whose port a stranger tried (handshake.h), none of the job's frames lost.
  CHECK(run.count("troupe: cut off 127.0.0.1:") >= 2);  // net/limits.h's one line per cut-off
  CHECK(run.count(": handshake: ") == 2);                // the two dials with no or a wrong secret
}

TEST_CASE("multiprocess: an encrypted job seals its direct links and stripes, bit for bit, collectives included",
          "[net][secret]") {
  LaunchOptions o;
  o.encrypt = true;
  o.env = {{"TROUPE_SHM", "0"}};
  check_all_passed(run_ranks(2, "net rank: encrypted", o), 2);
  check_all_passed(run_ranks(2, "collectives rank: all", o), 2);
  o.insecure = true;
  o.command = {"true"};
  CHECK_THROWS_WITH(launch(o), Catch::Contains("--encrypt needs the job secret"));
}

TEST_CASE("multiprocess: a rank holding another job's secret cannot join, and every rank says why", "[net][secret]") {
  const std::string wrong =
      (std::filesystem::temp_directory_path() / ("troupe-wrong-" + std::to_string(::getpid()) + ".secret")).string();
  write_job_secret_file(wrong, generate_job_secret());
  LaunchOptions o;
  o.env = {{"TROUPE_TEST_WRONG_SECRET", wrong}};
  o.stop_on_failure = false;
  RankRun run = run_ranks(2, "net rank: wrong secret", o);
  std::filesystem::remove(wrong);
  check_all_passed(run, 2);  // each rank's case checks its own error
}

TEST_CASE("multiprocess: the collectives' channel detects mismatched calls on both ranks", "[net][channel]") {
  RankRun run = run_ranks(2, "net rank: channel");
  check_all_passed(run, 2);
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

  // Multi-node numbering: node 1 of 2 with 2 ranks each holds ranks 2 and 3. Several nodes share
  // one secret, which the launcher cannot make for them: refused without one, saying how.
  o.nproc = 2;
  o.nnodes = 2;
  o.node_rank = 1;
  o.master = "127.0.0.1:29999";
  o.command = {"sh", "-c", "echo $RANK/$WORLD_SIZE/$MASTER_PORT/$NODE_RANK/${TROUPE_INSECURE:-}"};
  ::unsetenv("TROUPE_JOB_SECRET_FILE");
  CHECK_THROWS_WITH(launch(o), Catch::Contains("troupe secret FILE") && Catch::Contains("--insecure"));
  o.insecure = true;
  out.clear();
  CHECK(launch(o).exit_code == 0);
  CHECK(std::count(out.begin(), out.end(), "2 O 2/4/29999/1/1") == 1);
  CHECK(std::count(out.begin(), out.end(), "3 O 3/4/29999/1/1") == 1);

  // Huge pages for malloc's large blocks, added to the tunables a user set; off on request.
  ::unsetenv("GLIBC_TUNABLES");
  o = LaunchOptions{};
  o.on_line = [&](int, bool, const std::string& line) { out.push_back(line); };
  o.command = {"sh", "-c", "echo \"$GLIBC_TUNABLES\""};
  for (bool huge_pages : {true, false}) {
    o.huge_pages = huge_pages;
    out.clear();
    CHECK(launch(o).exit_code == 0);
    CHECK(out == std::vector<std::string>{huge_pages ? "glibc.malloc.hugetlb=1" : ""});
  }
  ::setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2", 1);
  o.huge_pages = true;
  out.clear();
  CHECK(launch(o).exit_code == 0);
  ::unsetenv("GLIBC_TUNABLES");
  CHECK(out == std::vector<std::string>{"glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"});
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

TEST_CASE("launcher: --max-restarts starts every rank again after a failure, up to K times", "[net][launch]") {
  LaunchOptions o;
  o.nproc = 2;
  o.grace = 1s;
  std::vector<std::string> out;
  std::mutex mutex;
  o.on_line = [&](int rank, bool, const std::string& line) {
    std::lock_guard lock(mutex);
    out.push_back(std::to_string(rank) + " " + line);
  };
  // Rank 1 fails in the first two attempts; rank 0 would run on, and is stopped each time.
  o.command = {"sh", "-c",
               "echo attempt $TROUPE_RESTART_COUNT port $MASTER_PORT run $TROUPE_RUN_ID; "
               "if [ $RANK = 1 ] && [ $TROUPE_RESTART_COUNT -lt 2 ]; then exit 3; fi; "
               "if [ $RANK = 0 ] && [ $TROUPE_RESTART_COUNT -lt 2 ]; then exec sleep 30; fi"};
  o.max_restarts = 3;
  auto start = std::chrono::steady_clock::now();
  LaunchResult r = launch(o);
  CHECK(std::chrono::steady_clock::now() - start < 20s);
  CHECK(r.exit_code == 0);
  CHECK(r.restarts == 2);
  CHECK(r.failure.empty());
  CHECK(std::count(out.begin(), out.end(), "-1 restarting every rank (restart 1 of 3)") == 1);
  CHECK(std::count(out.begin(), out.end(), "-1 restarting every rank (restart 2 of 3)") == 1);
  std::set<std::string> ports, runs;
  for (const std::string& line : out) {
    char port[16], run[64];
    int rank = 0, attempt = 0;
    if (std::sscanf(line.c_str(), "%d attempt %d port %15s run %63s", &rank, &attempt, port, run) == 4) {
      ports.insert(std::to_string(attempt) + ":" + port);
      runs.insert(run);
    }
  }
  CHECK(ports.size() == 3);  // one port per attempt, both ranks on it
  CHECK(runs.size() == 3);   // and a run id of its own: a rank of an older attempt cannot join

  // Out of restarts: the last attempt's failure is the job's.
  o.command = {"sh", "-c", "exit 4"};
  o.max_restarts = 1;
  r = launch(o);
  CHECK(r.exit_code == 4);
  CHECK(r.restarts == 1);
  CHECK_THAT(r.failure, Catch::Contains("exited with status 4"));

  o.max_restarts = -1;
  CHECK_THROWS_WITH(launch(o), Catch::Contains("--max-restarts must be >= 0"));
  o.max_restarts = 1;
  o.nnodes = 2;
  o.master = "127.0.0.1:29999";
  CHECK_THROWS_WITH(launch(o), Catch::Contains("needs --rdzv-endpoint HOST:PORT"));
  // Elastic (tests/net/elastic_test.cpp): rank 0's host is the round's, and MIN <= MAX.
  o.rdzv_endpoint = "127.0.0.1:29998";
  CHECK_THROWS_WITH(launch(o), Catch::Contains("leave out --master"));
  o.master.clear();
  o.min_nodes = 3;
  CHECK_THROWS_WITH(launch(o), Catch::Contains("1 <= MIN <= MAX, got 3:2"));
}
