#pragma once
// Placement by what ranks have (internal to net/remote/mesh*.cpp; mesh.h, "Placement"). Each rank
// reports its devices and free host memory to rank 0's placement actor ("troupe.placement"),
// which chooses, keeping count of what it has placed on each device.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "net/remote/mesh.h"

namespace troupe::net::detail {

// What a rank has, as it reports it.
struct RankReport {
  int64_t rank = 0;
  int64_t cuda_devices = 0;
  std::string cuda_missing;  // why it has none ("" when it has some)
  int64_t free_host_mib = 0;
  TROUPE_FIELDS(rank, cuda_devices, cuda_missing, free_host_mib)
};
RankReport report_this_rank();

// A device chosen for an actor.
struct PlacedDevice {
  int64_t rank = 0;
  std::string device;  // "cpu", "cuda:1"
  TROUPE_FIELDS(rank, device)
};

// any_of: the one device of that kind with the fewest actors placed on it (then on its rank, then
// the most free host memory, then the lowest rank); per_device: every device of that kind, by rank.
// `placed` counts the actors placed so far by device ("1/cuda:0"). DeviceError naming what is
// missing and what each rank has when no rank has such a device; `what` goes in front.
std::vector<PlacedDevice> choose_placement(const std::vector<RankReport>& reports, const Placement& place,
                                           const std::map<std::string, int64_t>& placed, const std::string& what);

// Asks rank 0's placement actor (spawned there on first use) to choose, and counts what it chose.
std::vector<PlacedDevice> place(const Placement& place, const std::string& what);

}  // namespace troupe::net::detail
