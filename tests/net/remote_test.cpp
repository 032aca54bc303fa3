// Remote actors between real processes on loopback, started by the launcher (the ranks:
// remote_ranks.cpp): rank 0 drives, the others serve.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "net/bootstrap/launcher.h"
#include "support/ranks.h"

using namespace troupe::net;

TEST_CASE("remote actors: spawn, calls with every kind of value, names, stop, on 2 and 3 ranks", "[net][remote]") {
  for (int n : {2, 3}) {
    RankRun run = run_ranks(n, "remote rank: basic");
    check_all_passed(run, n);
  }
}

TEST_CASE("remote actors: a rank that had one on another transport talks to one that never had", "[net][remote]") {
  RankRun run = run_ranks(2, "remote rank: a second RemoteActors on a new transport");
  check_all_passed(run, 2);
}

TEST_CASE("remote actors: over tcp only", "[net][remote]") {
  LaunchOptions o;
  o.env = {{"TROUPE_TRANSPORT", "tcp"}};
  RankRun run = run_ranks(3, "remote rank: basic", o);
  check_all_passed(run, 3);
}

TEST_CASE("remote actors: calls from each rank to an actor stay in order", "[net][remote]") {
  RankRun run = run_ranks(3, "remote rank: order");  // ranks 0 and 2 both call the actor on rank 1
  check_all_passed(run, 3);
}

TEST_CASE("remote actors: answers and requests written together never wait for a call that blocks", "[net][remote]") {
  LaunchOptions o;
  o.env = {{"TROUPE_TRANSPORT", "tcp"}, {"TROUPE_SHM", "0"}};  // the direct links, where answers are held
  RankRun run = run_ranks(2, "remote rank: held answers", o);
  check_all_passed(run, 2);
}

TEST_CASE("remote actors: errors come back typed, naming the actor, the method and the rank", "[net][remote]") {
  RankRun run = run_ranks(2, "remote rank: errors");
  check_all_passed(run, 2);
  // The failing send()s came back to their sender, which was there to hear: the host prints nothing,
  // and the sender prints the one it never threw when it closes.
  CHECK(run.count("a call sent by rank 0 failed") == 0);
  CHECK(run.count("[rank 0] remote actors: rank 0: never checked: an earlier send(): remote actor 'test.echo/1' on "
                  "rank 1: fail: index 7") == 1);
}

TEST_CASE("remote actors: a killed rank fails pending requests within 5 s, the others go on, restarts", "[net][remote]") {
  LaunchOptions o;
  o.stop_on_failure = false;  // let the survivors finish
  RankRun run = run_ranks(3, "remote rank: kill", o);
  INFO(run.output);
  REQUIRE(run.result.ranks.size() == 3);
  CHECK(run.result.ranks[1].signal == 9);
  CHECK(run.result.ranks[0].exit_code == 0);
  CHECK(run.result.ranks[2].exit_code == 0);
  CHECK(run.passed_ranks() == 2);
}

TEST_CASE("remote actors: ranks that only host, by `troupe serve --load`", "[net][remote]") {
  // Rank 0 runs its test case; the others are the `troupe` command hosting the plugin library.
  const std::string bin = TROUPE_BIN_DIR;
  LaunchOptions o;
  o.command = {"sh", "-c",
               "if [ $RANK = 0 ]; then exec \"$@\"; else exec " + bin + "/troupe serve --load " + bin +
                   "/../lib/libremote_plugin.so; fi",
               "sh"};
  RankRun run = run_ranks(3, "remote rank: plugin", o);
  INFO(run.output);
  CHECK(run.result.exit_code == 0);
  CHECK(run.count("[rank 0] All tests passed") == 1);
}

// The two remote-actor examples at small sizes, as `troupe launch` runs them: each checks its
// result against one process and exits 1 when they differ.
TEST_CASE("remote actors: remote_ensemble and pipeline_xlmr agree with one process", "[net][remote]") {
  const std::string bin = TROUPE_BIN_DIR;
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{bin + "/remote_ensemble", "--models", "4", "--T", "6", "--B", "3", "--C", "32",
                                 "--reps", "1", "--json"},
        std::vector<std::string>{bin + "/pipeline_xlmr", "--config", "tiny", "--batch", "6", "--micro", "2",
                                 "--max-length", "12", "--reps", "1", "--json"}}) {
    LaunchOptions o;
    o.nproc = 2;
    o.command = command;
    const RankRun run = launch_collecting(o);
    INFO(run.output);
    CHECK(run.result.exit_code == 0);
    CHECK_THAT(run.output, Catch::Contains("\"max_abs_diff\":0"));
  }
}
