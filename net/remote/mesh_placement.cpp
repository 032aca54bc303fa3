// Placement by what ranks have (mesh.h, "Placement"): the ranks' reports, rank 0's choice.
#include "net/remote/mesh_placement.h"

#include <unistd.h>

#include <algorithm>
#include <tuple>

#include "devices/backend.h"

namespace troupe::net::detail {

RankReport report_this_rank() {
  RankReport r;
  r.rank = actors_rank();
  r.cuda_devices = has_backend(DeviceType::cuda) ? backend(DeviceType::cuda).device_count() : 0;
  if (r.cuda_devices == 0) {
    r.cuda_missing = cuda_unavailable_reason();
    if (r.cuda_missing.empty()) r.cuda_missing = "no device";
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  r.free_host_mib = pages > 0 && page > 0 ? (static_cast<int64_t>(pages) * page) >> 20 : 0;
  return r;
}

std::vector<PlacedDevice> choose_placement(const std::vector<RankReport>& reports, const Placement& place,
                                           const std::map<std::string, int64_t>& placed, const std::string& what) {
  if (place.kind == Placement::Kind::fixed) throw ValueError(what + "no placement asked for");
  std::vector<PlacedDevice> candidates;
  for (const RankReport& r : reports) {
    if (place.device == DeviceType::cpu) candidates.push_back({r.rank, "cpu"});
    else
      for (int64_t k = 0; k < r.cuda_devices; ++k) candidates.push_back({r.rank, "cuda:" + std::to_string(k)});
  }
  if (candidates.empty()) {
    std::string have;
    for (const RankReport& r : reports)
      have += (have.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r.rank) + ": cpu only (" +
              r.cuda_missing + ")";
    throw DeviceError(what + "no rank has a " + std::string(troupe::name(place.device)) + " device (" + (have.empty() ? "no ranks" : have) +
                      ")");
  }
  if (place.kind == Placement::Kind::per_device) return candidates;
  auto count = [&](const std::string& key) {
    auto it = placed.find(key);
    return it == placed.end() ? int64_t{0} : it->second;
  };
  auto on_rank = [&](int64_t rank) {
    int64_t n = 0;
    const std::string prefix = std::to_string(rank) + "/";
    for (const auto& [key, k] : placed)
      if (key.compare(0, prefix.size(), prefix) == 0) n += k;
    return n;
  };
  auto free_mib = [&](int64_t rank) {
    for (const RankReport& r : reports)
      if (r.rank == rank) return r.free_host_mib;
    return int64_t{0};
  };
  auto load = [&](const PlacedDevice& d) {
    return std::make_tuple(count(std::to_string(d.rank) + "/" + d.device), on_rank(d.rank), -free_mib(d.rank), d.rank);
  };
  return {*std::min_element(candidates.begin(), candidates.end(),
                            [&](const PlacedDevice& a, const PlacedDevice& b) { return load(a) < load(b); })};
}

namespace {

struct RankReporter {
  RankReport report() const { return report_this_rank(); }
};
TROUPE_ACTOR(RankReporter, "troupe.rank_report", &RankReporter::report);

// The well-known actor `name` on `rank`: spawned by whoever asks first, looked up by the others.
RemoteActor well_known(int rank, const std::string& name, const std::string& type) {
  try {
    return lookup(name);
  } catch (const ValueError&) {
  }
  try {
    SpawnOptions options;
    options.rank = rank;
    options.name = name;
    return spawn_on(options, type);
  } catch (const ValueError&) {  // another rank spawned it meanwhile
    return lookup(name, std::chrono::seconds(5));
  }
}

// Rank 0's: asks every rank for its report, chooses, and counts what it placed.
class Placer {
 public:
  std::vector<PlacedDevice> place(int64_t kind, std::string device, std::string what) {
    const Placement request{static_cast<Placement::Kind>(kind), Device::parse(device).type};
    std::vector<RankReport> reports;
    for (int r = 0; r < actors_world_size(); ++r) {
      try {
        reports.push_back(reporter(r).request<RankReport>("report").get());
      } catch (const CommError&) {  // a lost rank has nothing to offer
      }
    }
    std::vector<PlacedDevice> chosen = choose_placement(reports, request, placed_, what);
    for (const PlacedDevice& d : chosen) ++placed_[std::to_string(d.rank) + "/" + d.device];
    return chosen;
  }

 private:
  RemoteActor reporter(int rank) {
    auto it = reporters_.find(rank);
    if (it == reporters_.end())
      it = reporters_.emplace(rank, well_known(rank, "troupe.rank_report/" + std::to_string(rank), "troupe.rank_report")).first;
    return it->second;
  }
  std::map<int, RemoteActor> reporters_;
  std::map<std::string, int64_t> placed_;  // "rank/device" -> actors placed there
};
TROUPE_ACTOR(Placer, "troupe.placement", &Placer::place);

}  // namespace

std::vector<PlacedDevice> place(const Placement& place, const std::string& what) {
  RemoteActor placer = well_known(0, "troupe.placement", "troupe.placement");
  return placer
      .request<std::vector<PlacedDevice>>("place", static_cast<int64_t>(place.kind),
                                          std::string(place.device == DeviceType::cpu ? "cpu" : "cuda"), what)
      .get();
}

RemoteActor spawn_placed(const Placement& place, std::string_view type, WireValue arguments) {
  const std::string what = "spawn_on(any_of(" + std::string(troupe::name(place.device)) + ")): " + std::string(type) + ": ";
  if (place.kind != Placement::Kind::any_of)
    throw ValueError(what + "spawn_on places one actor: any_of(kind); per_device is for spawn_mesh");
  const PlacedDevice chosen = detail::place(place, what).at(0);
  SpawnOptions options;
  options.rank = static_cast<int>(chosen.rank);
  options.device = Device::parse(chosen.device);
  return spawn(options, type, std::move(arguments));
}

}  // namespace troupe::net::detail
