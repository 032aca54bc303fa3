// Remote actors between real processes on loopback, started by the launcher: each rank runs
// tests/net/helpers/remote_worker.cpp, rank 0 drives, the others serve.
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>

#include "net/launcher.h"

using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

struct Job {
  LaunchResult result;
  std::string output;  // "[rank R] line" per line
  int count(const std::string& part) const {
    int n = 0;
    for (size_t at = output.find(part); at != std::string::npos; at = output.find(part, at + 1)) ++n;
    return n;
  }
};

Job run(int nproc, const std::string& scenario, LaunchOptions options = {}) {
  options.nproc = nproc;
  options.command = {std::string(TROUPE_BIN_DIR) + "/remote_worker", scenario};
  options.grace = 2s;
  Job job;
  std::mutex mutex;
  options.on_line = [&](int rank, bool, const std::string& line) {
    std::lock_guard lock(mutex);
    job.output += "[rank " + std::to_string(rank) + "] " + line + "\n";
  };
  job.result = launch(options);
  return job;
}

}  // namespace

TEST_CASE("remote actors: spawn, calls with every kind of value, names, stop, on 2 and 3 ranks", "[net][remote]") {
  for (int n : {2, 3}) {
    Job job = run(n, "basic");
    INFO(job.output);
    CHECK(job.result.exit_code == 0);
    CHECK(job.count("ok basic rank") == n);
  }
}

TEST_CASE("remote actors: over tcp only", "[net][remote]") {
  LaunchOptions o;
  o.env = {{"TROUPE_TRANSPORT", "tcp"}};
  Job job = run(3, "basic", o);
  INFO(job.output);
  CHECK(job.result.exit_code == 0);
  CHECK(job.count("ok basic rank") == 3);
}

TEST_CASE("remote actors: calls from each rank to an actor stay in order", "[net][remote]") {
  Job job = run(3, "order");  // ranks 0 and 2 both call the actor on rank 1
  INFO(job.output);
  CHECK(job.result.exit_code == 0);
  CHECK(job.count("ok order rank") == 3);
}

TEST_CASE("remote actors: errors come back typed, naming the actor, the method and the rank", "[net][remote]") {
  Job job = run(2, "errors");
  INFO(job.output);
  CHECK(job.result.exit_code == 0);
  CHECK(job.count("ok errors rank") == 2);
  // The failing send() is reported where it ran.
  CHECK(job.count("[rank 1] remote actors: rank 1: a call sent by rank 0 failed: remote actor 'test.echo/1' on rank 1: "
                  "fail: bad shape") == 1);
}

TEST_CASE("remote actors: a killed rank fails pending requests within 5 s, the others go on, restarts", "[net][remote]") {
  LaunchOptions o;
  o.stop_on_failure = false;  // let the survivors finish
  Job job = run(3, "kill", o);
  INFO(job.output);
  REQUIRE(job.result.ranks.size() == 3);
  CHECK(job.result.ranks[1].signal == 9);
  CHECK(job.result.ranks[0].exit_code == 0);
  CHECK(job.result.ranks[2].exit_code == 0);
  CHECK(job.count("ok dead rank detected") == 1);
  CHECK(job.count("ok kill rank") == 2);
}

TEST_CASE("remote actors: ranks that only host, by `troupe serve --load`", "[net][remote]") {
  LaunchOptions o;
  o.nproc = 3;
  o.grace = 2s;
  const std::string bin = TROUPE_BIN_DIR;
  o.command = {"sh", "-c",
               "if [ $RANK = 0 ]; then exec " + bin + "/remote_worker plugin; else exec " + bin +
                   "/troupe serve --load " + bin + "/../lib/libremote_plugin.so; fi"};
  std::string output;
  std::mutex mutex;
  o.on_line = [&](int rank, bool, const std::string& line) {
    std::lock_guard lock(mutex);
    output += "[rank " + std::to_string(rank) + "] " + line + "\n";
  };
  LaunchResult r = launch(o);
  INFO(output);
  CHECK(r.exit_code == 0);
  CHECK(output.find("[rank 0] ok plugin rank 0") != std::string::npos);
}
