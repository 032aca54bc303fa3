// A mesh's shape and its views: points, slices and single members (mesh.h).
#include "net/remote/mesh_state.h"

namespace troupe::net {

namespace {

std::string dim_names(const MeshShape& shape) {
  std::string out;
  for (const MeshDim& d : shape) out += (out.empty() ? "" : ", ") + d.name;
  return out.empty() ? "none" : out;
}

const detail::MeshState& checked(const std::shared_ptr<detail::MeshState>& state) {
  if (!state) throw ValueError("Mesh: the handle is empty");
  return *state;
}

}  // namespace

int64_t MeshPoint::operator[](std::string_view dim) const {
  for (size_t d = 0; d < dims.size(); ++d)
    if (dims[d] == dim) return coords.at(d);
  std::string names;
  for (const std::string& n : dims) names += (names.empty() ? "" : ", ") + n;
  throw ValueError("MeshPoint: no dim '" + std::string(dim) + "' (the mesh's dims: " + names + ")");
}

std::string MeshPoint::str() const {
  std::string out = "[";
  for (size_t d = 0; d < dims.size(); ++d)
    out += (d ? "," : "") + dims[d] + "=" + std::to_string(coords.at(d));
  return out + "]";
}

Mesh::Mesh(std::shared_ptr<detail::MeshState> state) : state_(std::move(state)) {
  shape_ = checked(state_).shape;
  members_.resize(state_->members.size());
  for (size_t i = 0; i < members_.size(); ++i) members_[i] = i;
}

const std::string& Mesh::name() const { return checked(state_).name; }
const MeshShape& Mesh::shape() const {
  checked(state_);
  return shape_;
}
size_t Mesh::size() const {
  checked(state_);
  return members_.size();
}

std::vector<MeshPoint> Mesh::points() const {
  const detail::MeshState& state = checked(state_);
  std::vector<MeshPoint> out;
  for (size_t i : members_) out.push_back(state.members[i].point);
  return out;
}

std::vector<RemoteActor> Mesh::members() const {
  const detail::MeshState& state = checked(state_);
  std::vector<RemoteActor> out;
  for (size_t i : members_) out.push_back(state.members[i].actor);
  return out;
}

Mesh Mesh::slice(const std::vector<std::pair<std::string, int64_t>>& fixed) const {
  const detail::MeshState& state = checked(state_);
  Mesh out = *this;
  for (const auto& [dim, at] : fixed) {
    auto it = std::find_if(out.shape_.begin(), out.shape_.end(), [&](const MeshDim& d) { return d.name == dim; });
    if (it == out.shape_.end())
      throw ValueError("mesh '" + state.name + "': slice: no dim '" + dim + "' (this view's dims: " +
                       dim_names(out.shape_) + ")");
    if (at < 0 || at >= it->size)
      throw IndexError("mesh '" + state.name + "': slice: " + dim + "=" + std::to_string(at) + " outside [0, " +
                       std::to_string(it->size) + ")");
    out.shape_.erase(it);
    std::erase_if(out.members_, [&](size_t i) { return state.members[i].point[dim] != at; });
  }
  return out;
}

RemoteActor Mesh::at(const std::vector<int64_t>& coords) const {
  const detail::MeshState& state = checked(state_);
  if (coords.size() != shape_.size())
    throw ValueError("mesh '" + state.name + "': at: " + std::to_string(coords.size()) + " coordinates for the " +
                     std::to_string(shape_.size()) + " dims of this view (" + dim_names(shape_) + ")");
  size_t position = 0;
  for (size_t d = 0; d < coords.size(); ++d) {
    if (coords[d] < 0 || coords[d] >= shape_[d].size)
      throw IndexError("mesh '" + state.name + "': at: " + shape_[d].name + "=" + std::to_string(coords[d]) +
                       " outside [0, " + std::to_string(shape_[d].size) + ")");
    position = position * static_cast<size_t>(shape_[d].size) + static_cast<size_t>(coords[d]);
  }
  return state.members[members_.at(position)].actor;
}

}  // namespace troupe::net
