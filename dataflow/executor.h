#pragma once
// Executor: runs a Graph on actors. Each node is one CAF actor; a node fires when all its
// inputs for one invocation have arrived (messages are tagged by invocation), so independent
// nodes run in parallel and many invocations flow through the graph at once (pipelining).
//
//   Executor exec(graph, {.max_in_flight = 8});       // validates (GraphError), spawns the actors
//   Invocation r = exec.run({{"x", x}});              // blocks while 8 invocations are in flight
//   Tensor y = r.get("y").tensor();                   // waits; rethrows a node's error
//   std::map<std::string, Value> all = exec({{"x", x}});  // run and wait for every output
//
// Backpressure: run() blocks the caller until fewer than max_in_flight invocations are in
// flight, so a producer cannot grow memory without bound (do not call run() from inside a node
// of the same executor: it could wait for itself).
// Errors: an exception in a node fails that invocation's futures (same error type, message
// prefixed with the node's path); its other nodes are skipped; other invocations continue.
// Invocation::cancel() skips every node of the invocation that has not fired yet and fails its
// futures with CancelledError. Destroy executors before the Runtime whose actors they use.
//
// Ranks: with a process group, every rank builds the same graph and an Executor on the group
// (the same executors, in the same order; each constructor waits for the other ranks' up to the
// group's timeout). Nodes run on the rank given by NodeRef::on_rank (default 0, the driver); only
// that rank spawns their actors. Rank 0 calls run(); the others call serve(), which returns when
// rank 0's executor is destroyed. Each rank's part of the executor is a remote actor
// (net/remote/remote_actor.h) named "troupe.dataflow/<group id>.<n>/<rank>" (the group's n-th
// executor). Values crossing ranks must be tensors: a value goes to another rank as one call to
// the part there, however many of its nodes read it (its tensor a zero-copy part of the message;
// no p2p tag of yours is taken). Rank 0 starts each invocation on the ranks that run some of the
// graph's nodes, with its first value to each (a rank that runs none hears nothing of it), and
// each reports to rank 0 when it is done with it (with its error, if a node failed), so rank 0's futures and in-flight bound
// cover the whole job. A lost rank fails every pending invocation
// with PeerLostError naming it, within 5 s; serve() then throws it. Cancelling skips the pending
// nodes of rank 0 only.
// Healing: when every node is pure (ops, switches and merges are; calls, modules, sub-graphs and
// loops marked with NodeRef::pure), a lost rank other than 0 costs no invocation: rank 0 moves its
// nodes to the surviving ranks (each to the one running the fewest nodes then; rank_of() says
// where a node is now), the survivors make their new nodes, and every invocation that was in
// flight runs again from its inputs (a pure node may run twice for one invocation); run() waits
// meanwhile. Its futures stay those run() gave. The lost rank does not come back to this
// executor. Losing rank 0 ends the job as above; graphs with a node not pure fail as above.
// Remote actors: the executor uses the process's net::RemoteActors when the program made one
// (make it before the executor and destroy it after), else one it makes on the group's
// transport, shared by the executors of the process and closed with the last (which waits, as
// ~RemoteActors does, until the other ranks are done with theirs). So a program may
// host and call its own remote actors beside an executor: serve() returns when rank 0's executor
// is gone, net::serve() when the drivers' RemoteActors are. Rank 0 of the job keeps the names:
// with an executor on a sub-group without it, it needs a RemoteActors all the same. Executors
// made one after another without a RemoteActors of the program's each open and close one; the
// calls of a rank already at the next wait for rank 0's next (net/remote/endpoint.h, generation).
//
//   auto world = net::init_process_group();             // under `troupe launch --nproc 2`
//   net::RemoteActors actors(world);                     // optional: only for actors of your own
//   Graph g = build();                                   // e.g. g.op(...).on_rank(1)
//   Executor exec(g, {.group = world});
//   if (world->rank() == 0) y = exec({{"x", x}}).at("y"); else exec.serve();
//
// CUDA graphs (a static graph on one GPU, small batches: the launches cost more than the kernels):
//
//   Executor exec(g, {.cuda_graph = true});          // g's nodes all .on(Device::cuda(0))
//   for (auto& x : batches) y = exec({{"x", x}}).at("y");   // the first is captured, the rest replay it
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "actors/future.h"
#include "dataflow/graph.h"
#include "dataflow/value.h"

namespace troupe {

namespace net {
class ProcessGroup;
}

struct ExecutorOptions {
  int max_in_flight = 4;                    // invocations in flight before run() blocks; >= 1
  std::shared_ptr<net::ProcessGroup> group = nullptr;  // ranks the nodes are placed on; none: this process
  // Every node an op or call placed on one CUDA device, one process: the first invocation runs its
  // nodes in order on one stream and is captured as a CUDA graph; later ones whose inputs have the
  // same dtypes and shapes replay it with one launch (their outputs copied out of the graph's
  // memory); others run on the node actors. ValueError naming a node that cannot be captured.
  bool cuda_graph = false;
};

namespace detail {
struct InvocationState;
struct ExecutorCore;
}  // namespace detail

class Invocation {
 public:
  Invocation(Invocation&&) noexcept = default;
  Invocation& operator=(Invocation&&) noexcept = default;

  uint64_t id() const;
  // The future of one graph output (ValueError naming the outputs when there is none).
  Future<Value>& future(std::string_view output);
  Value get(std::string_view output) { return future(output).get(); }
  std::map<std::string, Value> get_all();  // waits for every output; rethrows the error
  void cancel();
  bool done() const;  // every node has finished with (or skipped) this invocation

 private:
  friend class Executor;
  Invocation() = default;
  std::shared_ptr<detail::InvocationState> state_;
  std::shared_ptr<const std::vector<std::string>> names_;  // the graph's outputs, in futures_' order
  std::vector<Future<Value>> futures_;
};

class Executor {
 public:
  explicit Executor(const Graph& graph, ExecutorOptions options = {});
  ~Executor();  // waits for the invocations in flight, then stops the node actors
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // inputs: one value per graph input, by name (ValueError for missing or unknown names;
  // ShapeError/DTypeError when a tensor does not match the input's declared meta).
  Invocation run(std::map<std::string, Value> inputs);
  std::map<std::string, Value> operator()(std::map<std::string, Value> inputs) { return run(std::move(inputs)).get_all(); }
  void wait_idle();  // returns when nothing is in flight
  // Ranks other than 0: runs this rank's nodes until rank 0's executor goes away.
  void serve();

  int in_flight() const;
  int peak_in_flight() const;  // the most invocations ever in flight at once
  int node_actors() const;     // nodes this rank runs (loop bodies excluded)
  int rank_of(std::string_view node) const;  // the rank a node ("sub/node") runs on now; ValueError if none
  bool heals() const;          // over ranks with every node pure: a lost rank is healed (above)
  const std::vector<std::string>& input_names() const;
  const std::vector<std::string>& output_names() const;

 private:
  std::shared_ptr<detail::ExecutorCore> core_;
};

}  // namespace troupe
