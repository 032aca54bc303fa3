// Two ranks in two network namespaces joined by a veth pair: p2p and remote actors over tcp://
// with the job secret, as across two hosts (the ranks: multiprocess_ranks.cpp, remote_ranks.cpp). Needs
// root and `ip netns`; skipped otherwise.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>

#include "net/job_secret.h"
#include "net/bootstrap/launcher.h"
#include "support/ranks.h"
#include "support/skip.h"

using namespace troupe::net;

namespace {

bool sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()) == 0; }

// Namespaces trp<pid>a (10.231.0.1) and trp<pid>b (10.231.0.2); deleted again on scope exit.
struct Namespaces {
  std::string a, b;
  bool ok = false;
  Namespaces() {
    const std::string id = std::to_string(::getpid() % 100000);
    a = "trp" + id + "a";
    b = "trp" + id + "b";
    const std::string va = "tv" + id + "a", vb = "tv" + id + "b";
    ok = sh("ip netns add " + a) && sh("ip netns add " + b) &&
         sh("ip link add " + va + " type veth peer name " + vb) && sh("ip link set " + va + " netns " + a) &&
         sh("ip link set " + vb + " netns " + b) && sh("ip -n " + a + " addr add 10.231.0.1/24 dev " + va) &&
         sh("ip -n " + b + " addr add 10.231.0.2/24 dev " + vb) && sh("ip -n " + a + " link set " + va + " up") &&
         sh("ip -n " + b + " link set " + vb + " up") && sh("ip -n " + a + " link set lo up") &&
         sh("ip -n " + b + " link set lo up");
  }
  ~Namespaces() {
    sh("ip netns del " + a);  // the veth pair goes with its namespaces
    sh("ip netns del " + b);
  }
};

}  // namespace

TEST_CASE("netns: two namespaces over a veth pair, tcp:// with the job secret, p2p and remote actors", "[net][netns]") {
  if (::geteuid() != 0 || !sh("ip netns list")) SKIP_TEST("needs root and `ip netns` (iproute2)");
  Namespaces ns;
  if (!ns.ok) SKIP_TEST("could not create network namespaces and a veth pair here");
  const std::string key =
      (std::filesystem::temp_directory_path() / ("troupe-netns-" + std::to_string(::getpid()) + ".secret")).string();
  write_job_secret_file(key, generate_job_secret());
  for (const char* rank_test : {"net rank: p2p", "net rank: secret", "remote rank: basic"}) {
    LaunchOptions o;
    o.master = "10.231.0.1:29500";
    o.secret_file = key;
    o.env = {{"TROUPE_TRANSPORT", "tcp"}};
    // Rank 0 runs in the first namespace, rank 1 in the second.
    o.command = {"sh", "-c",
                 "if [ $RANK = 0 ]; then ns=" + ns.a + "; else ns=" + ns.b + "; fi; exec ip netns exec $ns \"$@\"",
                 "sh"};
    RankRun run = run_ranks(2, rank_test, o);
    INFO(rank_test << "\n" << run.output);
    CHECK(run.result.exit_code == 0);
    CHECK(run.passed_ranks() == 2);
  }
  std::filesystem::remove(key);
}
