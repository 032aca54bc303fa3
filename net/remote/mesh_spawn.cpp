// Spawning a mesh (mesh.h, "Layout", "Placement"): its points, the ranks they go to, the members,
// and a relay on each rank that hosts some.
#include <atomic>
#include <set>

#include "net/remote/mesh_placement.h"
#include "devices/error_kinds.h"
#include "net/remote/mesh_state.h"

namespace troupe::net::detail {

namespace {

std::atomic<int> meshes_spawned{0};  // this process's, for default names

// Every point of the shape, row-major.
std::vector<MeshPoint> points_of(const MeshShape& shape, const std::string& what) {
  if (shape.empty()) throw ValueError(what + "the shape has no dims");
  std::set<std::string> names;
  int64_t n = 1;
  for (const MeshDim& d : shape) {
    if (d.name.empty()) throw ValueError(what + "a dim has no name");
    if (!names.insert(d.name).second) throw ValueError(what + "dim '" + d.name + "' is named twice");
    if (d.size < 1) throw ValueError(what + "dim '" + d.name + "' has size " + std::to_string(d.size) + " (>= 1 needed)");
    n *= d.size;
  }
  std::vector<MeshPoint> points(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    MeshPoint& p = points[static_cast<size_t>(i)];
    p.index = i;
    p.coords.resize(shape.size());
    for (size_t d = shape.size(), rest = static_cast<size_t>(i); d-- > 0;) {
      p.coords[d] = static_cast<int64_t>(rest % static_cast<size_t>(shape[d].size));
      rest /= static_cast<size_t>(shape[d].size);
    }
    for (const MeshDim& d : shape) p.dims.push_back(d.name);
  }
  return points;
}

std::string member_name(const std::string& mesh, const MeshPoint& p) {
  std::string out = mesh + "[";
  for (size_t d = 0; d < p.coords.size(); ++d) out += (d ? "," : "") + std::to_string(p.coords[d]);
  return out + "]";
}

}  // namespace

std::shared_ptr<MeshState> spawn_mesh(const MeshOptions& options, std::string_view type, MeshShape shape,
                                      WireValue arguments) {
  const int me = actors_rank(), size = actors_world_size();
  std::string what = "spawn_mesh(" + std::string(type) + "): ";
  if (options.max_restarts < 0) throw ValueError(what + "max_restarts must be >= 0");
  // Where each point goes: a rank, and a device there.
  std::vector<int> ranks = options.ranks;
  std::vector<std::string> devices;
  if (options.place.kind == Placement::Kind::per_device) {
    if (!shape.empty() || !ranks.empty())
      throw ValueError(what + "per_device lays the mesh out itself: give no shape and no ranks");
    for (const PlacedDevice& d : place(options.place, what)) {
      ranks.push_back(static_cast<int>(d.rank));
      devices.push_back(d.device);
    }
    shape = {{"device", static_cast<int64_t>(ranks.size())}};
  } else if (options.place.kind == Placement::Kind::any_of) {
    throw ValueError(what + "any_of places one actor (spawn_on); a mesh takes per_device");
  }
  const std::vector<MeshPoint> points = points_of(shape, what);
  if (ranks.empty())
    for (int r = 0; r < size; ++r) ranks.push_back(r);
  for (int r : ranks)
    if (r < 0 || r >= size)
      throw IndexError(what + "rank " + std::to_string(r) + " outside a world of " + std::to_string(size));

  auto state = std::make_shared<MeshState>();
  state->name = !options.name.empty() ? options.name
                                      : std::string(type) + ".mesh" + std::to_string(meshes_spawned++) +
                                            (me == 0 ? "" : "@" + std::to_string(me));
  what = "spawn_mesh(" + std::string(type) + ") '" + state->name + "': ";
  state->type = std::string(type);
  state->shape = shape;
  state->home = me;
  state->chunk_bytes = options.chunk_bytes;
  const size_t n = points.size();
  try {
    for (size_t i = 0; i < n; ++i) {
      SpawnOptions spawn_options;
      spawn_options.rank = devices.empty() ? ranks[i * ranks.size() / n] : ranks[i];
      spawn_options.name = member_name(state->name, points[i]);
      spawn_options.max_restarts = options.max_restarts;
      if (!devices.empty()) spawn_options.device = Device::parse(devices[i]);
      WireValue member_arguments = arguments;
      member_arguments.as_list().insert(member_arguments.as_list().begin(), to_value(points[i]));
      RemoteActor actor = spawn(spawn_options, type, std::move(member_arguments));
      state->members.push_back(MeshMember{points[i], spawn_options.name, actor});
    }
    std::map<int, int64_t> hosting;  // rank -> members
    for (const MeshMember& m : state->members) ++hosting[m.actor.rank()];
    for (const auto& [r, count] : hosting) state->relay(r);
    std::string dims;
    for (const MeshDim& d : shape) dims += (dims.empty() ? "" : ",") + d.name + "=" + std::to_string(d.size);
    state->calls = &metrics::counter("troupe_mesh_calls_total", "Calls made to an actor mesh from this rank",
                                     {{"mesh", state->name}});
    for (const auto& [r, count] : hosting) {
      metrics::Gauge& g = metrics::gauge("troupe_mesh_members", "An actor mesh's members on a rank, as spawned",
                                         {{"mesh", state->name}, {"shape", dims}, {"rank", std::to_string(r)}});
      g.set(count);
      state->members_on[r] = &g;
    }
  } catch (...) {
    std::exception_ptr failed = with_context(what, std::current_exception());
    try {
      Mesh(state).stop();
    } catch (...) {  // the first failure is the one to report
    }
    std::rethrow_exception(failed);
  }
  return state;
}

}  // namespace troupe::net::detail
