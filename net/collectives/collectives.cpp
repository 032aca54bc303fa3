// The public collectives (net/collectives.h): argument checks, the call's descriptor and sequence
// number, the choice of algorithm (for all_reduce, the group's cached one for the call's shape:
// all_reduce.h), and running the rank's part here or on the group's actor.
#include "net/collectives.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "actors/observe/metrics.h"
#include "actors/observe/profiler.h"
#include "devices/error.h"
#include "devices/host_staging.h"
#include "net/collectives/algorithms.h"
#include "net/collectives/all_reduce.h"
#include "net/collectives/collective_actor.h"
#include "net/collectives/group_state.h"
#include "net/collectives/host_groups.h"
#include "net/collectives/reduce_kernels.h"
#include "net/transport.h"

namespace troupe::net {

namespace {

using collectives::begin_call;
using collectives::CollectiveCall;
using collectives::GroupState;

std::string at(const char* op, const ProcessGroup& g) {
  return std::string(op) + ": rank " + std::to_string(g.rank());
}

void check_defined(const char* op, const ProcessGroup& g, const Tensor& t, const std::string& what) {
  if (!t.defined()) throw ValueError(at(op, g) + ": " + what + " is undefined");
}

void check_root(const char* op, const ProcessGroup& g, int root) {
  if (root < 0 || root >= g.size())
    throw IndexError(at(op, g) + ": root " + std::to_string(root) + " outside a group of " + std::to_string(g.size()));
}

void check_reducible(const char* op, const ProcessGroup& g, const Tensor& t, ReduceOp r) {
  if (r == ReduceOp::none) throw ValueError(at(op, g) + ": no reduce op given");
  if (!collectives::reduction_supports(t.dtype(), r))
    throw DTypeError(at(op, g) + ": cannot reduce " + t.meta().str() + " with " + name(r) +
                     (r == ReduceOp::avg ? " (avg needs a floating dtype)" : ""));
}

// Every tensor of list is defined; list has one per rank; with `like`, each matches its meta.
void check_list(const char* op, const ProcessGroup& g, const std::vector<Tensor>& list, const char* what,
                const Tensor* like, bool same_shape) {
  if (list.size() != static_cast<size_t>(g.size()))
    throw ValueError(at(op, g) + ": " + std::to_string(list.size()) + " " + what + " for a group of " +
                     std::to_string(g.size()));
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string item = std::string(what) + "[" + std::to_string(i) + "]";
    check_defined(op, g, list[i], item);
    if (!like) continue;
    const std::string detail =
        at(op, g) + ": " + item + " is " + list[i].meta().str() + ", expected " + like->meta().str();
    if (list[i].dtype() != like->dtype()) throw DTypeError(detail);
    if (same_shape && list[i].shape() != like->shape()) throw ShapeError(detail);
  }
}

// Outputs a collective fills: empty (filled for you) or one per rank (replaced).
void check_outputs(const char* op, const ProcessGroup& g, const std::vector<Tensor>& outputs) {
  if (!outputs.empty() && outputs.size() != static_cast<size_t>(g.size()))
    throw ValueError(at(op, g) + ": " + std::to_string(outputs.size()) + " outputs for a group of " +
                     std::to_string(g.size()) + " (pass an empty vector or one per rank)");
}

// The algorithms work on contiguous host tensors, flattened where they split them. A device
// tensor's copy into pinned memory is queued when the collective is called (on the caller's stream,
// after the work that wrote it) and waited for when the collective runs: an asynchronous one does
// not block its caller on the device.
Tensor host_bytes(const HostStaging& staged, const char* op) {
  staged.synchronize(op);
  return staged.host;
}
Tensor host_flat(const HostStaging& staged, const char* op) {
  Tensor t = host_bytes(staged, op);
  return t.reshape({t.numel()});
}
std::vector<Tensor> host_bytes(const std::vector<HostStaging>& staged, const char* op) {
  std::vector<Tensor> parts;
  for (const HostStaging& s : staged) parts.push_back(host_bytes(s, op));
  return parts;
}
Tensor restore(const Tensor& result, const TensorMeta& like) {
  Tensor shaped = result.shape() == like.shape ? result : result.reshape(like.shape);
  return like.device.is_cpu() ? shaped : shaped.to(like.device);
}

// When the group's collectives take two levels (host_groups.h), the levels' calls, numbered now by
// number_levels(hosts, levels); else null. Shared: a plan's body is copied into std::function.
template <class NumberLevels>
std::shared_ptr<collectives::TwoLevel> two_level(ProcessGroup& g, NumberLevels number_levels) {
  if (g.size() < 2) return nullptr;
  const collectives::HostGroups& hosts = GroupState::of(g).host_groups();
  if (!hosts.two_level) return nullptr;
  auto levels = std::make_shared<collectives::TwoLevel>();
  number_levels(hosts, *levels);
  return levels;
}

// A collective ready to run: its descriptor (sequence number taken in call order), the algorithm
// it will take, and the rank's part.
struct Plan {
  CollectiveCall call;
  const char* algorithm;  // for the profiler's span; the body sets call.algorithm if it takes another
  std::function<void(CollectiveCall&)> body;
  uint64_t bytes = 0;  // for the metrics; 0: the descriptor's count times the dtype's size
};

// Calls, bytes and seconds per collective and algorithm (metrics.h); the series are looked up
// once per pair, not per call.
struct CollectiveCounters {
  metrics::Counter& calls;
  metrics::Counter& bytes;
  metrics::Histogram& seconds;
};

CollectiveCounters& collective_counters(CollectiveOp op, const char* algorithm) {
  static std::mutex mutex;
  static std::map<std::pair<CollectiveOp, std::string>, std::unique_ptr<CollectiveCounters>> known;
  std::lock_guard lock(mutex);
  auto& slot = known[{op, algorithm}];
  if (!slot) {
    const metrics::Labels labels{{"collective", name(op)}, {"algorithm", algorithm}};
    slot.reset(new CollectiveCounters{
        metrics::counter("troupe_collective_calls_total", "Collective calls this rank took part in", labels),
        metrics::counter("troupe_collective_bytes_total", "Bytes of the tensors given to collectives", labels),
        metrics::histogram("troupe_collective_seconds", "Time this rank spent in a collective call", labels)});
  }
  return *slot;
}

void count_collective(const CollectiveCall& call, uint64_t bytes, std::chrono::steady_clock::time_point start) {
  CollectiveCounters& c = collective_counters(call.op.op, call.algorithm);
  c.calls.add();
  c.bytes.add(bytes);
  c.seconds.observe(metrics::seconds_since(start));
}

// caller_waits: the call runs on the thread of a caller that waits for it. A small call's peers
// wait for this rank in turn, so its receives poll the transport's small_collective_poll before
// sleeping (a sleep here makes them late, and ranks end up waking each other by turns). An async
// call's thread runs beside the caller's own work, so it keeps the ordinary busy-poll.
void run(Plan& plan, Timeout timeout, bool caller_waits = true) {
  CollectiveCall& call = plan.call;
  call.deadline = call.channel.deadline(timeout);
  const uint64_t bytes = plan.bytes ? plan.bytes : call.op.count * itemsize(call.op.dtype);
  Transport& transport = call.channel.group().transport();
  if (caller_waits && bytes <= transport.direct_max()) call.poll = transport.small_collective_poll();
  const bool counted = metrics::enabled();
  const auto start = counted ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  call.algorithm = call.size() == 1 ? "local" : plan.algorithm;
  CollectiveSpan span(name(call.op.op), bytes, call.op.collective_seq);  // on every rank of a job's trace
  try {
    plan.body(call);
    span.set_algorithm(call.algorithm);
    if (counted) count_collective(call, bytes, start);
  } catch (const CommError&) {
    throw;  // the transport's and the channel's errors reach every rank by themselves
  } catch (const std::exception& e) {
    // A timeout or local failure: tell the others now instead of letting them wait it out. For
    // them it is a failure of the collective (CommError), whatever this rank's own error was.
    call.channel.abort(call.op.collective_seq,
                       CommError(std::string(name(call.op.op)) + ": collective #" + std::to_string(call.op.collective_seq) +
                                 " failed on rank " + std::to_string(call.rank()) + ": " + e.what()));
    throw;
  }
}

Work run_async(ProcessGroup& g, Plan plan, Timeout timeout, const char* what) {
  auto done = std::make_shared<detail::Completion>();
  GroupState::of(g).actor().post([plan = std::move(plan), timeout, done]() mutable {
    try {
      run(plan, timeout, /*caller_waits=*/false);
      done->finish();
    } catch (...) {
      done->finish(std::current_exception());
    }
  });
  return Work::from_completion(std::move(done), timeout.value_or(g.timeout()), what);
}


Plan plan_broadcast(ProcessGroup& g, Tensor& tensor, int root) {
  check_defined("broadcast", g, tensor, "tensor");
  check_root("broadcast", g, root);
  const TensorMeta meta = tensor.meta();
  CollectiveCall call = begin_call(g, CollectiveOp::broadcast, ReduceOp::none, meta.dtype, tensor.numel(), root);
  auto levels = two_level(g, [&](const collectives::HostGroups& hosts, collectives::TwoLevel& l) {
    const int root_host = hosts.host_of[static_cast<size_t>(root)];
    const bool on_root_host = hosts.host_of[static_cast<size_t>(g.rank())] == root_host;
    const auto& root_members = hosts.members[static_cast<size_t>(root_host)];
    const int root_within = static_cast<int>(std::find(root_members.begin(), root_members.end(), root) - root_members.begin());
    const bool shared_host = hosts.local->size() > 1;
    if (on_root_host && shared_host) l.within_first = begin_call(*hosts.local, CollectiveOp::broadcast, ReduceOp::none, meta.dtype, tensor.numel(), root_within);
    if (hosts.leaders) l.leaders = begin_call(*hosts.leaders, CollectiveOp::broadcast, ReduceOp::none, meta.dtype, tensor.numel(), root_host);
    if (!on_root_host && shared_host) l.within_last = begin_call(*hosts.local, CollectiveOp::broadcast, ReduceOp::none, meta.dtype, tensor.numel(), 0);
  });
  const char* algorithm = levels ? "two_level" : "binomial_tree";
  return {std::move(call), algorithm, [staged = stage_to_host(tensor), meta, root, levels, out = &tensor](CollectiveCall& c) {
            if (c.size() == 1) return;
            const Tensor data = host_bytes(staged, "broadcast");
            Tensor got;
            if (levels) {
              levels->deadline = c.deadline;
              levels->poll = c.poll;
              got = collectives::two_level_broadcast(*levels, data);
            } else {
              got = collectives::binomial_broadcast(c, data, root);
            }
            if (c.rank() != root) *out = restore(got, meta);
          }};
}

Plan plan_reduce(ProcessGroup& g, Tensor& tensor, int root, ReduceOp op) {
  check_defined("reduce", g, tensor, "tensor");
  check_root("reduce", g, root);
  check_reducible("reduce", g, tensor, op);
  const TensorMeta meta = tensor.meta();
  CollectiveCall call = begin_call(g, CollectiveOp::reduce, op, meta.dtype, tensor.numel(), root);
  return {std::move(call), "binomial_tree", [staged = stage_to_host(tensor), meta, root, op, out = &tensor](CollectiveCall& c) {
            if (c.size() == 1) return;
            Tensor got = collectives::binomial_reduce(c, host_flat(staged, "reduce"), root, op);
            if (c.rank() == root) *out = restore(got, meta);
          }};
}

Plan plan_all_reduce(ProcessGroup& g, Tensor& tensor, ReduceOp op) {
  check_defined("all_reduce", g, tensor, "tensor");
  check_reducible("all_reduce", g, tensor, op);
  const TensorMeta meta = tensor.meta();
  // Set up on the first call of this shape; this call's turn (on the shared memory, or the two
  // levels' calls) is taken now, in call order, like the sequence number.
  std::shared_ptr<collectives::AllReduce> algorithm = GroupState::of(g).all_reduce(tensor.numel(), meta.dtype, op);
  collectives::AllReduce::Turn turn = algorithm->take_turn(g);
  CollectiveCall call = begin_call(g, CollectiveOp::all_reduce, op, meta.dtype, tensor.numel());
  const char* label = algorithm->name();
  return {std::move(call), label,
          [staged = stage_to_host(tensor), meta, algorithm = std::move(algorithm), turn = std::move(turn), out = &tensor](CollectiveCall& c) {
            if (c.size() == 1) return;
            *out = restore(algorithm->run(c, turn, host_flat(staged, "all_reduce")), meta);
          }};
}

Plan plan_scatter(ProcessGroup& g, Tensor& output, const std::vector<Tensor>& inputs, int root) {
  check_defined("scatter", g, output, "output (it fixes the part's dtype and shape)");
  check_root("scatter", g, root);
  std::vector<HostStaging> staged;
  if (g.rank() == root) {
    check_list("scatter", g, inputs, "inputs", &output, true);
    for (const Tensor& t : inputs) staged.push_back(stage_to_host(t));
  }
  const TensorMeta meta = output.meta();
  CollectiveCall call = begin_call(g, CollectiveOp::scatter, ReduceOp::none, meta.dtype, output.numel(), root);
  return {std::move(call), "direct", [staged = std::move(staged), meta, root, out = &output](CollectiveCall& c) {
            const std::vector<Tensor> parts = host_bytes(staged, "scatter");
            Tensor got = c.size() == 1 ? parts[0] : collectives::direct_scatter(c, parts, root);
            *out = restore(got, meta);
          }};
}

Plan plan_gather(ProcessGroup& g, std::vector<Tensor>& outputs, const Tensor& input, int root) {
  check_defined("gather", g, input, "input");
  check_root("gather", g, root);
  if (g.rank() == root) check_outputs("gather", g, outputs);
  const TensorMeta meta = input.meta();
  CollectiveCall call = begin_call(g, CollectiveOp::gather, ReduceOp::none, meta.dtype, input.numel(), root);
  return {std::move(call), "direct", [staged = stage_to_host(input), input, root, out = &outputs](CollectiveCall& c) {
            if (c.size() == 1) {
              *out = {input};
              return;
            }
            std::vector<Tensor> parts = collectives::direct_gather(c, host_bytes(staged, "gather"), root);
            if (c.rank() != root) return;
            parts[static_cast<size_t>(root)] = input;
            for (Tensor& p : parts) p = restore(p, {p.dtype(), p.shape(), input.device()});
            *out = std::move(parts);
          }};
}

Plan plan_all_gather(ProcessGroup& g, std::vector<Tensor>& outputs, const Tensor& input) {
  check_defined("all_gather", g, input, "input");
  check_outputs("all_gather", g, outputs);
  const TensorMeta meta = input.meta();
  CollectiveCall call = begin_call(g, CollectiveOp::all_gather, ReduceOp::none, meta.dtype, input.numel());
  return {std::move(call), "ring", [staged = stage_to_host(input), input, out = &outputs](CollectiveCall& c) {
            if (c.size() == 1) {
              *out = {input};
              return;
            }
            std::vector<Tensor> parts = collectives::ring_all_gather(c, host_bytes(staged, "all_gather"));
            parts[static_cast<size_t>(c.rank())] = input;
            for (Tensor& p : parts) p = restore(p, {p.dtype(), p.shape(), input.device()});
            *out = std::move(parts);
          }};
}

Plan plan_reduce_scatter(ProcessGroup& g, Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) {
  check_list("reduce_scatter", g, inputs, "inputs", nullptr, true);
  check_list("reduce_scatter", g, inputs, "inputs", &inputs[0], true);
  check_reducible("reduce_scatter", g, inputs[0], op);
  std::vector<HostStaging> staged;
  for (const Tensor& t : inputs) staged.push_back(stage_to_host(t));
  const TensorMeta meta = inputs[0].meta();
  CollectiveCall call = begin_call(g, CollectiveOp::reduce_scatter, op, meta.dtype, inputs[0].numel());
  return {std::move(call), "ring", [staged = std::move(staged), meta, op, out = &output](CollectiveCall& c) {
            const std::vector<Tensor> parts = host_bytes(staged, "reduce_scatter");
            Tensor got = c.size() == 1 ? parts[0] : collectives::ring_reduce_scatter(c, parts, op);
            *out = restore(got, meta);
          }};
}

Plan plan_all_to_all(ProcessGroup& g, std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs) {
  check_list("all_to_all", g, inputs, "inputs", nullptr, false);
  check_list("all_to_all", g, inputs, "inputs", &inputs[0], false);
  check_outputs("all_to_all", g, outputs);
  std::vector<HostStaging> staged;
  for (const Tensor& t : inputs) staged.push_back(stage_to_host(t));
  const Device device = inputs[0].device();
  uint64_t bytes = 0;
  for (const HostStaging& p : staged) bytes += p.bytes();
  // Parts may differ in size per pair, so the descriptor's count is the number of parts.
  CollectiveCall call = begin_call(g, CollectiveOp::all_to_all, ReduceOp::none, inputs[0].dtype(), inputs.size());
  return {std::move(call), "direct", [staged = std::move(staged), device, out = &outputs](CollectiveCall& c) {
            const std::vector<Tensor> parts = host_bytes(staged, "all_to_all");
            std::vector<Tensor> got = c.size() == 1 ? parts : collectives::direct_all_to_all(c, parts);
            for (Tensor& p : got) p = restore(p, {p.dtype(), p.shape(), device});
            *out = std::move(got);
          },
          bytes};
}

Plan plan_barrier(ProcessGroup& g) {
  CollectiveCall call = begin_call(g, CollectiveOp::barrier, ReduceOp::none, DType::u8, 0);
  return {std::move(call), "dissemination", [](CollectiveCall& c) { collectives::dissemination_barrier(c); }};
}

}  // namespace

void broadcast(ProcessGroup& group, Tensor& tensor, int root, Timeout timeout) {
  Plan plan = plan_broadcast(group, tensor, root);
  run(plan, timeout);
}
void reduce(ProcessGroup& group, Tensor& tensor, int root, ReduceOp op, Timeout timeout) {
  Plan plan = plan_reduce(group, tensor, root, op);
  run(plan, timeout);
}
void all_reduce(ProcessGroup& group, Tensor& tensor, ReduceOp op, Timeout timeout) {
  Plan plan = plan_all_reduce(group, tensor, op);
  run(plan, timeout);
}
void scatter(ProcessGroup& group, Tensor& output, const std::vector<Tensor>& inputs, int root, Timeout timeout) {
  Plan plan = plan_scatter(group, output, inputs, root);
  run(plan, timeout);
}
void gather(ProcessGroup& group, std::vector<Tensor>& outputs, const Tensor& input, int root, Timeout timeout) {
  Plan plan = plan_gather(group, outputs, input, root);
  run(plan, timeout);
}
void all_gather(ProcessGroup& group, std::vector<Tensor>& outputs, const Tensor& input, Timeout timeout) {
  Plan plan = plan_all_gather(group, outputs, input);
  run(plan, timeout);
}
void reduce_scatter(ProcessGroup& group, Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                    Timeout timeout) {
  Plan plan = plan_reduce_scatter(group, output, inputs, op);
  run(plan, timeout);
}
void all_to_all(ProcessGroup& group, std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                Timeout timeout) {
  Plan plan = plan_all_to_all(group, outputs, inputs);
  run(plan, timeout);
}
void barrier(ProcessGroup& group, Timeout timeout) {
  Plan plan = plan_barrier(group);
  run(plan, timeout);
}

Work broadcast_async(ProcessGroup& group, Tensor& tensor, int root, Timeout timeout) {
  return run_async(group, plan_broadcast(group, tensor, root), timeout, "broadcast");
}
Work reduce_async(ProcessGroup& group, Tensor& tensor, int root, ReduceOp op, Timeout timeout) {
  return run_async(group, plan_reduce(group, tensor, root, op), timeout, "reduce");
}
Work all_reduce_async(ProcessGroup& group, Tensor& tensor, ReduceOp op, Timeout timeout) {
  return run_async(group, plan_all_reduce(group, tensor, op), timeout, "all_reduce");
}
Work scatter_async(ProcessGroup& group, Tensor& output, const std::vector<Tensor>& inputs, int root,
                   Timeout timeout) {
  return run_async(group, plan_scatter(group, output, inputs, root), timeout, "scatter");
}
Work gather_async(ProcessGroup& group, std::vector<Tensor>& outputs, const Tensor& input, int root,
                  Timeout timeout) {
  return run_async(group, plan_gather(group, outputs, input, root), timeout, "gather");
}
Work all_gather_async(ProcessGroup& group, std::vector<Tensor>& outputs, const Tensor& input, Timeout timeout) {
  return run_async(group, plan_all_gather(group, outputs, input), timeout, "all_gather");
}
Work reduce_scatter_async(ProcessGroup& group, Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                          Timeout timeout) {
  return run_async(group, plan_reduce_scatter(group, output, inputs, op), timeout, "reduce_scatter");
}
Work all_to_all_async(ProcessGroup& group, std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                      Timeout timeout) {
  return run_async(group, plan_all_to_all(group, outputs, inputs), timeout, "all_to_all");
}
Work barrier_async(ProcessGroup& group, Timeout timeout) {
  return run_async(group, plan_barrier(group), timeout, "barrier");
}

}  // namespace troupe::net
