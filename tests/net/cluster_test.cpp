// Ranks on 2 and 4 "hosts" of a test cluster (scripts/netns_cluster.sh: a network namespace per
// host, joined by a bridge): the collectives, remote actors and dist_sgd across hosts, a host whose
// link goes down mid-collective, and the Kubernetes example's rendezvous with rank 0's name
// appearing late or never. Needs root and iproute2; skipped otherwise.

#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "net/bootstrap/launcher.h"
#include "support/cluster.h"
#include "support/ranks.h"
#include "support/sanitizer.h"

using namespace troupe::net;
using namespace std::chrono_literals;

RankRun run_killing_ranks(int n, const std::string& rank_test, LaunchOptions o);  // kept_state_test.cpp

TEST_CASE("cluster: collectives, remote actors and home CPUs with one rank on each of 2 and 4 hosts", "[net][cluster]") {
  for (int hosts : {2, 4}) {
    Cluster cluster(hosts);
    REQUIRE_CLUSTER(cluster);
    // The hosts share this machine's CPUs: their ranks get a CPU each where they fit (2 hosts on
    // 2 CPUs), none where they do not.
    for (const char* rank_test : {"collectives rank: all", "remote rank: basic", "net rank: home cpus"}) {
      RankRun run = run_ranks(hosts, rank_test, cluster.options(1));
      INFO(hosts << " hosts, " << rank_test);
      check_all_passed(run, hosts);
    }
  }
}

TEST_CASE("cluster: several ranks per host, the collectives take two levels", "[net][cluster]") {
  Cluster cluster(2);
  REQUIRE_CLUSTER(cluster);
  struct Layout {
    int ranks;
    std::string host, hosts;  // the shell's host of $RANK; every rank's, for the ranks to check
  };
  const std::vector<Layout> layouts{Layout{4, "$((RANK / 2))", "0,0,1,1"}, Layout{4, "$((RANK % 2))", "0,1,0,1"},
                                    Layout{3, "$((RANK / 2))", "0,0,1"}};
  // The layouts differ in which ranks lead, not in threads: TSan takes the first (sanitizer.h).
  for (size_t i = 0; i < (kUnderThreadSanitizer ? 1 : layouts.size()); ++i) {
    const Layout& l = layouts[i];
    LaunchOptions o = cluster.placed(l.host);
    o.env = {{"TROUPE_TEST_HOSTS", l.hosts}};
    RankRun run = run_ranks(l.ranks, "collectives rank: two levels", o);
    INFO("hosts " << l.hosts);
    check_all_passed(run, l.ranks);
  }
}

// A loss inside a two-level all_reduce is a loss for every survivor, whichever level it reached
// them by (a rank that found it aborts the levels for the others): an elastic job re-forms on a
// PeerLostError, and a CommError would end its ranks.
TEST_CASE("cluster: kill -9 of a rank mid-collective over two levels gives every survivor PeerLostError", "[net][cluster]") {
  Cluster cluster(2);
  REQUIRE_CLUSTER(cluster);
  LaunchOptions o = cluster.placed("$((RANK / 2))");
  o.env = {{"TROUPE_TEST_HOSTS", "0,0,1,1"}};
  o.stop_on_failure = false;  // the survivors run on to their own verdicts
  const RankRun run = run_ranks(4, "collectives rank: kill", o);
  INFO(run.digest());
  REQUIRE(run.result.ranks.size() == 4);
  CHECK(run.result.ranks[1].signal == 9);
  CHECK(run.passed_ranks() == 3);
}

TEST_CASE("cluster: dist_sgd with 2 ranks on each of 2 hosts", "[net][cluster]") {
  Cluster cluster(2);
  REQUIRE_CLUSTER(cluster);
  LaunchOptions o = cluster.options(2);
  o.nproc = 4;
  for (const char* part : {"/dist_sgd", "--epochs", "1", "--subset", "2048", "--json"})
    o.command.push_back(part[0] == '/' ? std::string(TROUPE_BIN_DIR) + part : part);
  const RankRun run = launch_collecting(o);
  INFO(run.output);
  CHECK(run.result.exit_code == 0);
  CHECK_THAT(run.output, Catch::Contains("\"world\":4"));
}

TEST_CASE("cluster: a host's link goes down mid-collective, every survivor gets PeerLostError within 5 s",
          "[net][cluster]") {
  Cluster cluster(3);
  REQUIRE_CLUSTER(cluster);
  LaunchOptions o = cluster.options(1);
  o.stop_on_failure = false;
  // The ranks all-reduce in a loop; host 1's cable comes out once they are well under way: a second
  // after rank 0 says they met (a fixed delay from the launch cut it before the rendezvous, under
  // ThreadSanitizer on a loaded machine).
  const std::filesystem::path under_way =
      std::filesystem::temp_directory_path() / ("troupe-link-down-" + std::to_string(::getpid()));
  std::filesystem::remove(under_way);
  o.env.emplace_back("TROUPE_TEST_UNDER_WAY_FILE", under_way.string());
  std::thread cut([&] {
    for (int i = 0; i < 1200 && !std::filesystem::exists(under_way); ++i) std::this_thread::sleep_for(100ms);
    std::this_thread::sleep_for(1s);
    cluster.link(1, false);
  });
  RankRun run = run_ranks(3, "collectives rank: link down", o);
  cut.join();
  std::filesystem::remove(under_way);
  check_all_passed(run, 3);
}

TEST_CASE("cluster: a supervised actor whose host is killed comes back on another host with its state",
          "[net][cluster][kept]") {
  Cluster cluster(3);
  REQUIRE_CLUSTER(cluster);
  run_killing_ranks(3, "kept state rank: respawn from snapshots", cluster.options(1));  // hosts 1 and 2 killed
}

namespace {

// A pod's view of names: `ip netns exec NS` bind-mounts /etc/netns/NS/hosts over /etc/hosts, and
// in a namespace with no route to a name server that file is all the resolver has. Written in
// place (the bind mount keeps the inode), so a line added later is seen by a rank already running,
// as a headless Service's record appears once the pod has an address. Removed on scope exit.
struct PodHosts {
  std::filesystem::path dir;
  explicit PodHosts(const std::string& ns) : dir("/etc/netns/" + ns) {
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "hosts") << "127.0.0.1 localhost\n";
  }
  ~PodHosts() { std::filesystem::remove_all(dir); }
  void add(const std::string& address, const std::string& name) const {
    std::ofstream(dir / "hosts", std::ios::app) << address << " " << name << "\n";
  }
};

const std::string kRank0Name = "troupe-dist-sgd-0.troupe-ranks";

// examples/k8s/: each rank runs rank.sh in its namespace with the variables its pod would have
// (the manifest's env, the completion index, the pod's address), rank.sh runs dist_sgd.
LaunchOptions as_pods(const Cluster& cluster) {
  LaunchOptions o;
  o.nproc = 2;
  o.master = cluster.address(0) + ":29400";  // the launcher's default, replaced by the manifest's below
  o.env = {{"MASTER_ADDR", kRank0Name}, {"MASTER_PORT", "29400"}, {"WORLD_SIZE", "2"}};
  o.command = {"sh", "-c",
               "export JOB_COMPLETION_INDEX=$RANK POD_IP=$(" + cluster_script() + " addr $RANK " + cluster.prefix +
                   "); exec ip netns exec " + cluster.prefix + "-h$RANK " + std::string(TROUPE_SOURCE_DIR) +
                   "/examples/k8s/rank.sh \"$@\"",
               "sh"};
  for (const char* part : {"/dist_sgd", "--epochs", "1", "--subset", "2048", "--json"})
    o.command.push_back(part[0] == '/' ? std::string(TROUPE_BIN_DIR) + part : part);
  return o;
}

}  // namespace

TEST_CASE("cluster: the Kubernetes example's ranks meet when rank 0's name resolves only after a while",
          "[net][cluster][k8s]") {
  Cluster cluster(2);
  REQUIRE_CLUSTER(cluster);
  PodHosts rank1(cluster.prefix + "-h1");
  // The Service publishes rank 0's record once rank 1 has looked for it (however slowly its
  // process starts: a fixed delay raced it under a sanitizer on a busy machine); rank 1 looks again
  // after a growing pause.
  LaunchOptions o = as_pods(cluster);
  std::atomic<bool> published{false};
  o.on_line = [&](int, bool, const std::string& line) {
    if (line.find("does not resolve yet") != std::string::npos && !published.exchange(true))
      rank1.add(cluster.address(0), kRank0Name);
  };
  const RankRun run = launch_collecting(o);
  INFO(run.output);
  CHECK(run.result.exit_code == 0);
  CHECK_THAT(run.output, Catch::Contains("MASTER_ADDR='" + kRank0Name + "' does not resolve yet"));
  CHECK_THAT(run.output, Catch::Contains("\"world\":2"));
}

TEST_CASE("cluster: the Kubernetes example's rank 1 names MASTER_ADDR when rank 0's name never resolves",
          "[net][cluster][k8s]") {
  Cluster cluster(2);
  REQUIRE_CLUSTER(cluster);
  PodHosts rank1(cluster.prefix + "-h1");
  LaunchOptions o = as_pods(cluster);
  o.env.push_back({"TROUPE_RESOLVE_TIMEOUT", "2"});
  const RankRun run = launch_collecting(o);
  INFO(run.output);
  CHECK(run.result.exit_code != 0);
  CHECK_THAT(run.output, Catch::Contains("[rank 1] dist_sgd: init_process_group: MASTER_ADDR='" + kRank0Name +
                                         "' does not resolve"));
  CHECK(run.seconds < 60);  // not the 5-minute rendezvous timeout
}
