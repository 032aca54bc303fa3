#include "dataflow/placement.h"

#include <algorithm>

namespace troupe::detail {

Placement::Placement(const Plan& plan, std::vector<int> node_ranks, int this_rank, int world)
    : ranks(std::move(node_ranks)), rank(this_rank) {
  // Every node sends on every output in every invocation (a dead token at least), so a rank that
  // reads a value of rank 0's is started by the first one; the others by a start of their own.
  std::vector<uint8_t> runs_nodes(world, 0), fed(world, 0);
  const auto feeds = [&](const std::vector<Target>& targets) {
    for (const Target& t : targets) fed[owner(t)] = 1;
  };
  for (const auto& targets : plan.input_consumers) feeds(targets);
  for (size_t i = 0; i < plan.nodes.size(); ++i) {
    runs_nodes[ranks[i]] = 1;
    if (ranks[i] == 0)
      for (const auto& targets : plan.nodes[i].consumers) feeds(targets);
    if (!local(static_cast<int>(i))) continue;
    ++local_nodes;
    if (plan.nodes[i].inputs.empty()) sources.push_back(static_cast<int>(i));
  }
  for (int r = 1; r < world; ++r) {
    if (!runs_nodes[r]) continue;
    started_ranks.push_back(r);
    if (!fed[r]) unfed_ranks.push_back(r);
  }
}

std::vector<int> ranks_of(const Plan& plan) {
  std::vector<int> ranks;
  ranks.reserve(plan.nodes.size());
  for (const PlanNode& pn : plan.nodes) ranks.push_back(pn.rank);
  return ranks;
}

std::vector<int> without_ranks(std::vector<int> ranks, const std::vector<uint8_t>& lost) {
  std::vector<int> load(lost.size(), 0);
  for (int r : ranks)
    if (!lost[r]) ++load[r];
  for (int& r : ranks) {
    if (!lost[r]) continue;
    int best = -1;
    for (int s = 0; s < static_cast<int>(lost.size()); ++s)
      if (!lost[s] && (best < 0 || load[s] < load[best])) best = s;
    r = best;  // rank 0 is never lost here: the driver's loss ends the job
    ++load[best];
  }
  return ranks;
}

}  // namespace troupe::detail
