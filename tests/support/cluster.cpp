#include "support/cluster.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace {

bool sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()) == 0; }

std::string first_line_of(const std::string& command) {
  std::string out;
  if (FILE* p = ::popen(command.c_str(), "r")) {
    char line[256];
    if (std::fgets(line, sizeof line, p)) out = line;
    ::pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

}  // namespace

std::string cluster_script() { return std::string(TROUPE_SOURCE_DIR) + "/scripts/netns_cluster.sh"; }

bool can_make_clusters() { return ::geteuid() == 0 && sh("ip netns list"); }

Cluster::Cluster(int n)
    : prefix("tc" + std::to_string(::getpid() % 100000)),
      hosts(n),
      ok(can_make_clusters() && sh(cluster_script() + " up " + std::to_string(n) + " " + prefix)) {}

Cluster::~Cluster() { sh(cluster_script() + " down " + prefix); }

std::string Cluster::address(int host) const {
  return first_line_of(cluster_script() + " addr " + std::to_string(host) + " " + prefix);
}

void Cluster::link(int host, bool up) const {
  sh(cluster_script() + " link " + std::to_string(host) + (up ? " up " : " down ") + prefix);
}

troupe::net::LaunchOptions Cluster::options(int ranks_per_host) const {
  return placed("$((RANK / " + std::to_string(ranks_per_host) + "))");
}

troupe::net::LaunchOptions Cluster::placed(const std::string& host) const {
  troupe::net::LaunchOptions o;
  o.master = address(0) + ":29400";
  o.command = {"sh", "-c", "exec ip netns exec " + prefix + "-h" + host + " \"$@\"", "sh"};
  return o;
}
