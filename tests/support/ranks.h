#pragma once
// N ranks in a test: N processes of this test executable, each running one hidden test case
// (tag "[.rank]") with the env:// variables set by troupe's launcher. A rank's body is ordinary
// Catch code, run once per rank; the test that starts them checks that every rank passed.
//
//   TEST_CASE("net rank: p2p", "[.rank]") {          // one rank; hidden, so ctest never runs it alone
//     auto world = net::init_process_group();
//     ...  CHECK(...) ...
//   }
//   TEST_CASE("p2p on 4 ranks", "[net]") {
//     RankRun run = run_ranks(4, "net rank: p2p");
//     check_all_passed(run, 4);   // exit 0, and each rank printed Catch's "All tests passed"
//   }
//
// A world of one rank in this process (tcp:// on a free port) serves the tests of one rank's
// semantics and of argument checks: `auto world = world_of_one();`.
//
// Processes, not threads (as Gloo's tests spawn them): the tests that start ranks exercise what only
// processes have (the transport and rendezvous between them, shared memory across them, kill -9 of
// one), and Catch2 v2's assertions are not thread-safe. A rank that needs an argument reads it from
// an environment variable set in LaunchOptions::env.
#include <memory>
#include <string>
#include <vector>

#include "net/bootstrap/launcher.h"
#include "net/process_group.h"

struct RankRun {
  troupe::net::LaunchResult result;
  std::string output;  // "[rank R] line" per line, stdout and stderr together
  double seconds = 0;

  int count(const std::string& part) const;  // occurrences in output
  int passed_ranks() const { return count("All tests passed"); }
  std::string digest() const;                // output without Catch's banners and blank lines
};

// The command line of one rank: this test executable running the hidden test case `rank_test`.
std::vector<std::string> rank_command(const std::string& rank_test);

// Launches nproc ranks of rank_command(rank_test) and collects their output. options.command, when
// given, is a prefix that runs each rank's command line (`sh -c '... exec ip netns exec $ns "$@"' sh`);
// options.grace defaults to 2 s.
RankRun run_ranks(int nproc, const std::string& rank_test, troupe::net::LaunchOptions options = {});

// Launches options.command as given (an example, a script, a job engine) and collects its output
// as run_ranks does; options.on_line, when given, sees each line as it comes too.
RankRun launch_collecting(troupe::net::LaunchOptions options);

// CHECKs that the launch exited 0 and that `ranks` ranks passed, with the ranks' digest as context.
void check_all_passed(const RankRun& run, int ranks);

// A world of one: rank 0 of 1, in this process.
std::shared_ptr<troupe::net::ProcessGroup> world_of_one();
