#include "net/collectives/host_groups.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "net/process_group.h"
#include "net/transport.h"

namespace troupe::net::collectives {

namespace {

// Keys of the sub-groups (ProcessGroup::keyed_group), far from new_group's counted keys.
constexpr uint64_t kLocalKey = 0x6c6f63616c000000ull, kLeadersKey = 0x6c65616465727300ull;

}  // namespace

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
  const char* flat = std::getenv("TROUPE_HIERARCHICAL");
  const bool shared_host = std::any_of(h.members.begin(), h.members.end(), [](const auto& m) { return m.size() > 1; });
  h.two_level = h.hosts() > 1 && shared_host && !(flat && std::strcmp(flat, "0") == 0);
  const int mine = h.host_of[static_cast<size_t>(group.rank())];
  const std::vector<int>& here = h.members[static_cast<size_t>(mine)];
  h.local = group.keyed_group(kLocalKey + static_cast<uint64_t>(mine), here);
  if (here.front() == group.rank()) {
    std::vector<int> leaders;
    for (const auto& m : h.members) leaders.push_back(m.front());
    h.leaders = group.keyed_group(kLeadersKey, leaders);
  }
  return h;
}

}  // namespace troupe::net::collectives
