#pragma once
// A test cluster of network namespaces, one per "host", joined by a bridge
// (scripts/netns_cluster.sh), for tests whose ranks must sit on different hosts:
//
//   Cluster cluster(3);
//   REQUIRE_CLUSTER(cluster);                      // skipped without root and iproute2
//   RankRun run = run_ranks(3, "my rank test", cluster.options(1));  // rank r on host r
//   cluster.link(1, false);                         // host 1's cable comes out
//
// Removed again when the object goes.
#include <string>

#include "net/bootstrap/launcher.h"
#include "support/skip.h"

struct Cluster {
  explicit Cluster(int hosts);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  std::string address(int host) const;
  void link(int host, bool up) const;  // the host's one interface up or down

  // Launch options that put rank r on host r / ranks_per_host, rank 0's rendezvous on host 0.
  troupe::net::LaunchOptions options(int ranks_per_host) const;
  // The same with rank r on the host that the shell arithmetic `host` gives for $RANK.
  troupe::net::LaunchOptions placed(const std::string& host) const;

  std::string prefix;  // of the namespaces' names
  int hosts;
  bool ok;             // the namespaces and the bridge are up
};

// Root and `ip netns`: what a cluster needs.
bool can_make_clusters();

// netns_cluster.sh's path.
std::string cluster_script();

#define REQUIRE_CLUSTER(cluster)                                                  \
  if (!can_make_clusters()) SKIP_TEST("needs root and `ip netns` (iproute2)");    \
  if (!(cluster).ok) SKIP_TEST("could not create the namespaces and the bridge here")
