#include "net/collectives/host_groups.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "net/process_group.h"
#include "net/transport.h"

namespace troupe::net::collectives {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr uint64_t kLocalSalt = 0x6c6f63616c000000ull, kLeadersSalt = 0x6c65616465727300ull;

}  // namespace

bool HostGroups::two_level() const {
  if (const char* v = std::getenv("TROUPE_HIERARCHICAL"); v && std::strcmp(v, "0") == 0) return false;
  if (hosts() < 2) return false;
  for (const auto& m : members)
    if (m.size() > 1) return true;
  return false;
}

bool HostGroups::balanced() const {
  for (const auto& m : members)
    if (m.size() != members[0].size()) return false;
  return true;
}

HostGroups make_host_groups(ProcessGroup& group) {
  HostGroups h;
  Transport& t = group.transport();
  std::map<std::string, int> host_index;
  for (int r = 0; r < group.size(); ++r) {
    const auto [it, added] = host_index.emplace(t.host_id_of(group.global_rank(r)), h.hosts());
    if (added) h.members.emplace_back();
    h.host_of.push_back(it->second);
    h.members[static_cast<size_t>(it->second)].push_back(r);
  }
  const int mine = h.host_of[static_cast<size_t>(group.rank())];
  auto globals = [&](const std::vector<int>& ranks) {
    std::vector<int> g;
    for (int r : ranks) g.push_back(group.global_rank(r));
    return g;
  };
  h.local = std::make_shared<ProcessGroup>(group.shared_transport(),
                                           mix(group.id() ^ kLocalSalt ^ mix(static_cast<uint64_t>(mine))) | 1,
                                           globals(h.members[static_cast<size_t>(mine)]), group.timeout());
  if (h.members[static_cast<size_t>(mine)].front() == group.rank()) {
    std::vector<int> leaders;
    for (const auto& m : h.members) leaders.push_back(m.front());
    h.leaders = std::make_shared<ProcessGroup>(group.shared_transport(), mix(group.id() ^ kLeadersSalt) | 1,
                                               globals(leaders), group.timeout());
  }
  return h;
}

}  // namespace troupe::net::collectives
