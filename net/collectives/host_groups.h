#pragma once
// A group's ranks by host, for the two-level collectives (internal to net/collectives/): ranks on
// one host talk through shared memory and ipc://, one leader per host over the network.
//
//   const HostGroups& h = GroupState::of(group).host_groups();   // made once per group
//   if (h.two_level) ...   // h.local: this rank's host; h.leaders: one rank per host (on leaders)
//
// Every rank derives the same hosts from the transport's address table (hosts numbered by their
// lowest group rank; the leader of a host is its lowest group rank), and the same sub-group ids
// from the group's id, so no message is needed to agree on them.
#include <memory>
#include <vector>

namespace troupe::net {
class ProcessGroup;
}

namespace troupe::net::collectives {

struct HostGroups {
  std::vector<int> host_of;               // group rank -> host index
  std::vector<std::vector<int>> members;  // host index -> its group ranks, ascending
  std::shared_ptr<ProcessGroup> local;    // this rank's host (ranks in members order)
  std::shared_ptr<ProcessGroup> leaders;  // one rank per host, by host index; null unless this rank leads

  int hosts() const { return static_cast<int>(members.size()); }
  // More than one host, and some host with more than one rank: the two levels differ from the flat
  // algorithms. Off when TROUPE_HIERARCHICAL=0 (to measure the flat ones beside them).
  bool two_level = false;
};

HostGroups make_host_groups(ProcessGroup& group);

}  // namespace troupe::net::collectives
