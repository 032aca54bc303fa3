#pragma once
// Actor meshes: many remote actors of one type, one per point of a named shape laid over the job's
// ranks, spawned, called, sliced and supervised as one (as Monarch's meshes and Ray's actor pools).
//
//   struct Replica {
//     Replica(const net::MeshPoint& at, const Config& c);   // each member gets its coordinates first
//     Tensor forward(const Tensor& x);
//   };
//   TROUPE_ACTOR(Replica(const net::MeshPoint&, const Config&), "app.replica", &Replica::forward);
//
//   net::Mesh m = net::spawn_mesh("app.replica", {{"host", 2}, {"gpu", 4}}, config);  // 8 members
//   std::vector<Future<Tensor>> ys = m.call<Tensor>("forward", x);  // one future per member
//   Tensor all = wait(m.call_gather("forward", x));     // [2, 4, ...]: the answers stacked
//   Tensor sum = wait(m.call_reduce(ReduceOp::sum, "forward", x));  // reduced on the way back
//   m.slice({{"host", 1}}).send("reset");                // the 4 members of host 1: a [gpu] mesh
//   RemoteActor one = m.at({1, 3});                      // one member, as any remote actor
//   m.scatter<Tensor>("forward", xs);                     // xs[i] to member i (its first argument)
//
// Semantics
// - Layout: point i of N (row-major over the shape) lives on ranks[i * R / N] of the R ranks
//   (MeshOptions::ranks, default all of the job's): a [host, gpu] shape over H ranks puts a host's
//   points on one rank. A list of ranks as the shape, {0, 2, 3}, is the 1-D shape [rank] over them.
//   Member i is the actor "<mesh>[c0,c1,...]"; its constructor gets its MeshPoint first, then the
//   spawn's arguments. A mesh may be spawned anywhere remote actors may be called, actors included.
// - Calls: one message per rank that hosts members of the (sliced) mesh, carried down a tree of
//   those ranks rooted at the caller (each hop forwards before it runs its own members): 8-ary for
//   calls of up to 64 KiB of tensors (log8 hops), binomial for larger ones (log2 copies per sender),
//   with the tensors as zero-copy parts as in a single call (remote_actor.h, "Values"). A call with
//   a large host tensor (top-level argument of two MeshOptions::chunk_bytes or more) goes down a
//   chain of the ranks instead, the tensor after it in chunks that each rank forwards as they
//   arrive (a pipeline: about one transfer of the tensor plus a chunk per hop, not log2 copies of
//   it from the caller); a member's call starts once its whole argument is there. Each rank's
//   relay actor ("<mesh>.relay/<rank>") calls its members and sends their answers to the caller in
//   one message; call_reduce combines them on the way back up the same tree (ReduceOp on the answer
//   tensors, which must match in shape and dtype), so the caller receives one tensor per child.
//   When a method's reductions answered host tensors of two chunk_bytes or more, the next ones may
//   come back up a chain of the ranks instead, in chunks that each rank combines with its own
//   answers and passes on as they come (every link carries the result once, the hops overlap): the
//   mesh times both ways on its first calls and takes the faster, trying the other every 16th call.
//   A member's calls run in its mailbox, in the order calls through the mesh were made from a rank,
//   among calls that take the same way there: a large or streamed call goes down another tree than
//   a small one, and may reach a member after a small call made later (wait for its answers first
//   when that order matters). A relay forwards on the thread that receives the call, without a hop
//   through a scheduler (ActorType::on_receipt), and puts its members' calls straight into their
//   mailboxes.
// - Errors: a member's exception fails that member's future (the same type, naming the member);
//   call_gather and call_reduce fail with the first member error.
// - Supervision: when a rank is lost, the futures of exactly the members it hosted fail with
//   PeerLostError naming the member, its coordinates and the rank (call_gather, call_reduce: the
//   whole call); the other members' calls complete. With MeshOptions::max_restarts, each member is
//   respawned on the next live rank from its constructor arguments and, for a type with
//   TROUPE_STATE, with the state of its last snapshot (Mesh::snapshot()); the Mesh handle goes on
//   calling it there. on_down hears of each member that is down for good.
// - Placement: MeshOptions::place = per_device(DeviceType::cuda) puts one member on each such device
//   of the job (a 1-D shape [device]), spawn_on(any_of(DeviceType::cuda), ...) one actor on the
//   least loaded rank that has one. Rank 0 decides (as it holds the directory), from what each rank
//   reports (devices, free host memory) and what it placed before; a request no rank can meet is a
//   DeviceError naming what is missing and what each rank has.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "net/frame.h"
#include "net/remote/remote_actor.h"

namespace troupe::net {

// A member's place in its mesh.
struct MeshPoint {
  std::vector<std::string> dims;  // the mesh's dim names, outermost first
  std::vector<int64_t> coords;    // one per dim
  int64_t index = 0;              // row-major over the whole mesh
  int64_t operator[](std::string_view dim) const;  // ValueError for a dim the mesh has not
  std::string str() const;                         // "[host=1,gpu=0]"
  TROUPE_FIELDS(dims, coords, index)
};

struct MeshDim {
  std::string name;
  int64_t size = 0;
};
using MeshShape = std::vector<MeshDim>;

// Where actors go by what ranks have (see "Placement").
struct Placement {
  enum class Kind { fixed, any_of, per_device };
  Kind kind = Kind::fixed;
  DeviceType device = DeviceType::cpu;
};
inline Placement any_of(DeviceType device) { return {Placement::Kind::any_of, device}; }
inline Placement per_device(DeviceType device) { return {Placement::Kind::per_device, device}; }
// any_of(Device::cuda), per_device(Device::cuda): the kind of Device::cuda(n).
inline Placement any_of(Device (*kind)(int)) { return any_of(kind(0).type); }
inline Placement per_device(Device (*kind)(int)) { return per_device(kind(0).type); }

struct MeshOptions {
  std::string name;        // empty: "<type>.mesh<n>" (n counts this rank's meshes)
  std::vector<int> ranks;  // the ranks the points are laid over; empty: every rank of the job
  Placement place;         // per_device: one member per device (the shape given must be empty)
  int max_restarts = 0;    // per member (SpawnOptions::max_restarts)
  // A call's host tensor arguments of at least two chunks go down a chain of the ranks in chunks
  // of this many bytes, each rank forwarding a chunk as it arrives (see "Calls"); 0: never.
  size_t chunk_bytes = size_t{2} << 20;
};

namespace detail {
struct MeshState;
struct MeshCallSpec;
// Per member (position in the view): its answer as it came, or its error.
using MemberAnswer = std::function<void(size_t member, WireValue&& result, std::exception_ptr error)>;
std::shared_ptr<MeshState> spawn_mesh(const MeshOptions& options, std::string_view type, MeshShape shape,
                                      WireValue arguments);
RemoteActor spawn_placed(const Placement& place, std::string_view type, WireValue arguments);

// A mesh call's future: a request's (remote_actor.h), whose answers may come from any rank.
template <class T>
using MeshReply = ReplyState<T>;
}  // namespace detail

class Mesh {
 public:
  Mesh() = default;
  explicit Mesh(std::shared_ptr<detail::MeshState> state);

  const std::string& name() const;
  const MeshShape& shape() const;  // this view's
  size_t size() const;             // members in this view
  std::vector<MeshPoint> points() const;  // each member's point in the whole mesh, in view order
  std::vector<RemoteActor> members() const;

  // The members whose coordinate along each named dim is the one given, as a mesh without those
  // dims: m.slice({{"host", 1}}) of a [host, gpu] mesh is host 1's [gpu] mesh. IndexError, ValueError.
  Mesh slice(const std::vector<std::pair<std::string, int64_t>>& fixed) const;
  // One member, by its coordinates in this view.
  RemoteActor at(const std::vector<int64_t>& coords) const;

  // `method` on every member; one future per member, in view order.
  template <class R = WireValue, class... Args>
  std::vector<Future<R>> call(std::string_view method, const Args&... args) const;
  // The members' answers (tensors of one shape and dtype) stacked: [view shape..., answer shape...].
  template <class... Args>
  Future<Tensor> call_gather(std::string_view method, const Args&... args) const;
  // The members' answers reduced along the call's tree: one tensor.
  template <class... Args>
  Future<Tensor> call_reduce(ReduceOp op, std::string_view method, const Args&... args) const;
  // Fire and forget, to every member.
  template <class... Args>
  void send(std::string_view method, const Args&... args) const;
  // per_member[i] as member i's first argument, then `shared`; one future per member.
  template <class R = WireValue, class T, class... Args>
  std::vector<Future<R>> scatter(std::string_view method, const std::vector<T>& per_member, const Args&... shared) const;

  // fn(point, why) once per member down for good (restarts spent, or none); on a transport thread.
  void on_down(std::function<void(const MeshPoint& point, std::exception_ptr why)> fn) const;
  // A snapshot of every member's state (TROUPE_STATE, max_restarts > 0), after the calls whose
  // answers this rank has; a respawned member comes back with it.
  void snapshot() const;
  // Stops every member of the whole mesh and its relays.
  void stop() const;

 private:
  enum class Mode { answers, reduce, tell };
  // Starts the call: scattered, when not empty, holds each member's first argument.
  void start(std::string_view method, WireValue arguments, std::vector<WireValue> scattered, Mode mode, ReduceOp op,
             detail::MemberAnswer answer) const;
  Future<Tensor> start_gather(std::string_view method, WireValue arguments) const;
  Future<Tensor> start_reduce(ReduceOp op, std::string_view method, WireValue arguments) const;
  template <class R>
  std::vector<Future<R>> start_answers(std::string_view method, WireValue arguments, std::vector<WireValue> scattered) const;

  std::shared_ptr<detail::MeshState> state_;
  MeshShape shape_;
  std::vector<size_t> members_;  // indices into the whole mesh, in view order
};

// spawn_mesh(type, {{"host", 2}, {"gpu", 2}}, args...), spawn_mesh(type, std::vector<int>{1, 3}, args...),
// spawn_mesh(options, type, shape, args...). Returns once every member is constructed; a
// constructor's exception comes back as the same type (the members made are stopped).
template <class... Args>
Mesh spawn_mesh(const MeshOptions& options, std::string_view type, MeshShape shape, const Args&... args) {
  return Mesh(detail::spawn_mesh(options, type, std::move(shape), WireValue::list({to_value(args)...})));
}
template <class... Args>
Mesh spawn_mesh(std::string_view type, MeshShape shape, const Args&... args) {
  return spawn_mesh(MeshOptions{}, type, std::move(shape), args...);
}
template <class... Args>
Mesh spawn_mesh(std::string_view type, const std::vector<int>& ranks, const Args&... args) {
  MeshOptions options;
  options.ranks = ranks;
  return spawn_mesh(options, type, MeshShape{{"rank", static_cast<int64_t>(ranks.size())}}, args...);
}
template <class... Args>
Mesh spawn_mesh(std::string_view type, const Placement& place, const Args&... args) {
  MeshOptions options;
  options.place = place;
  return spawn_mesh(options, type, MeshShape{}, args...);
}

// One actor where `place` says (any_of(DeviceType::cuda): on a device of that kind, SpawnOptions::device).
template <class... Args>
RemoteActor spawn_on(const Placement& place, std::string_view type, const Args&... args) {
  return detail::spawn_placed(place, type, WireValue::list({to_value(args)...}));
}

template <class R>
std::vector<Future<R>> Mesh::start_answers(std::string_view method, WireValue arguments,
                                           std::vector<WireValue> scattered) const {
  std::vector<std::shared_ptr<detail::MeshReply<R>>> promises;
  std::vector<Future<R>> futures;
  for (size_t i = 0; i < members_.size(); ++i) {
    promises.push_back(std::make_shared<detail::MeshReply<R>>());
    futures.emplace_back(promises.back());
  }
  start(method, std::move(arguments), std::move(scattered), Mode::answers, ReduceOp::none,
        [promises = std::move(promises)](size_t i, WireValue&& result, std::exception_ptr error) mutable {
          if (error) return promises[i]->set_exception(error);
          if constexpr (std::is_void_v<R>) {
            promises[i]->set_value();
          } else {
            try {
              promises[i]->set_value(Codec<R>::decode(result));
            } catch (...) {
              promises[i]->set_exception(std::current_exception());
            }
          }
        });
  return futures;
}

template <class R, class... Args>
std::vector<Future<R>> Mesh::call(std::string_view method, const Args&... args) const {
  return start_answers<R>(method, WireValue::list({to_value(args)...}), {});
}

template <class... Args>
Future<Tensor> Mesh::call_gather(std::string_view method, const Args&... args) const {
  return start_gather(method, WireValue::list({to_value(args)...}));
}

template <class... Args>
Future<Tensor> Mesh::call_reduce(ReduceOp op, std::string_view method, const Args&... args) const {
  return start_reduce(op, method, WireValue::list({to_value(args)...}));
}

template <class... Args>
void Mesh::send(std::string_view method, const Args&... args) const {
  start(method, WireValue::list({to_value(args)...}), {}, Mode::tell, ReduceOp::none, nullptr);
}

template <class R, class T, class... Args>
std::vector<Future<R>> Mesh::scatter(std::string_view method, const std::vector<T>& per_member,
                                     const Args&... shared) const {
  if (per_member.size() != members_.size())
    throw ValueError("mesh '" + name() + "': scatter(" + std::string(method) + "): " + std::to_string(per_member.size()) +
                     " arguments for " + std::to_string(members_.size()) + " members");
  std::vector<WireValue> scattered;
  scattered.reserve(per_member.size());
  for (const T& x : per_member) scattered.push_back(to_value(x));
  return start_answers<R>(method, WireValue::list({to_value(shared)...}), std::move(scattered));
}

}  // namespace troupe::net
