// Two-level collectives for groups spread over hosts with several ranks each: within a host
// through shared memory and ipc://, across hosts between one leader per host over the network, so
// each host's data crosses the network once instead of once per rank. Each level is a call of its
// own on HostGroups' sub-groups, numbered by the dispatcher when the outer call was made.
#include "net/collectives/algorithms.h"
#include "net/collectives/all_reduce.h"
#include "net/collectives/group_state.h"
#include "net/collectives/reduce_kernels.h"
#include "net/errors.h"

namespace troupe::net::collectives {

namespace {

// Runs the levels in order; a level that fails here is aborted for its other ranks (they would
// otherwise wait for this one until their deadline), and so are the levels not reached yet.
template <class Body>
Tensor run_levels(TwoLevel& levels, Body body) {
  for (std::optional<CollectiveCall>* level : {&levels.within_first, &levels.leaders, &levels.within_last})
    if (*level) {
      (*level)->deadline = levels.deadline;
      (*level)->poll = levels.poll;
    }
  const auto abort_levels = [&](const Error& error) {
    for (std::optional<CollectiveCall>* level : {&levels.within_first, &levels.leaders, &levels.within_last})
      if (*level) (*level)->channel.abort((*level)->op.collective_seq, error);
  };
  const std::string failed = "two-level collective failed on this rank: ";
  try {
    return body();
  } catch (const PeerLostError& e) {  // a loss stays a loss for the others (an elastic job re-forms on it)
    abort_levels(PeerLostError(failed + e.what()));
    throw;
  } catch (const std::exception& e) {
    abort_levels(CommError(failed + e.what()));
    throw;
  }
}

// A level's all_reduce: its sub-group's own algorithm for the shape, set up once like the outer
// call's; within a host through its shared memory when the level has a ticket for it.
Tensor level_all_reduce(CollectiveCall& level, const std::optional<uint64_t>& ticket, const Tensor& t, ReduceOp op) {
  std::shared_ptr<AllReduce> algorithm = GroupState::of(level.channel.group()).all_reduce(t.numel(), t.dtype(), op);
  return algorithm->run(level, AllReduce::Turn{ticket, nullptr}, t);
}

}  // namespace

// Reduce within each host, then among the leaders, then hand the leader's result to its host. The
// hand-off is a second all_reduce within the host (shared memory, no rooted protocol) in which the
// others add zeros (multiply by ones); for max and min they give their host's partial result, which
// the whole group's result dominates.
Tensor two_level_all_reduce(TwoLevel& levels, const Tensor& data, ReduceOp op, int group_size) {
  return run_levels(levels, [&] {
    const ReduceOp combine = op == ReduceOp::avg ? ReduceOp::sum : op;
    Tensor t = data;
    if (levels.within_first) t = level_all_reduce(*levels.within_first, levels.shm_ticket, t, combine);
    if (levels.leaders) t = level_all_reduce(*levels.leaders, std::nullopt, t, combine);
    if (levels.within_last) {
      Tensor contribution = t;
      if (!levels.leaders && combine == ReduceOp::sum) contribution = Tensor::zeros(t.shape(), t.dtype());
      if (!levels.leaders && combine == ReduceOp::product) contribution = Tensor::ones(t.shape(), t.dtype());
      t = level_all_reduce(*levels.within_last, levels.shm_ticket_last, contribution, combine);
    }
    if (op == ReduceOp::avg) {
      t = t.contiguous();
      divide_buffer(t.mutable_raw_data(), static_cast<size_t>(t.numel()), t.dtype(), group_size);
    }
    return t;
  });
}

// Root to its host, root's leader to the other leaders, each other leader to its host.
Tensor two_level_broadcast(TwoLevel& levels, const Tensor& data) {
  return run_levels(levels, [&] {
    Tensor t = data;
    for (std::optional<CollectiveCall>* level : {&levels.within_first, &levels.leaders, &levels.within_last})
      if (*level) t = binomial_broadcast(**level, t, (*level)->op.root);
    return t;
  });
}

}  // namespace troupe::net::collectives
