#pragma once
// Placement: which rank runs each plan node, and what follows from that for one rank. An
// invocation keeps the placement it started under for its whole life; an executor that heals
// (executor.h, "Healing") makes a new one without the lost ranks, for the invocations after it.
// Internal to the executor.
//
//   auto now = std::make_shared<const Placement>(plan, ranks_of(plan), /*rank=*/1, /*world=*/3);
//   if (now->local(node)) ...;                               // this rank runs that node
//   std::vector<int> moved = without_ranks(now->ranks, lost);  // lost[r]: rank r is gone
#include <cstdint>
#include <vector>

#include "dataflow/plan.h"

namespace troupe::detail {

struct Placement {
  Placement(const Plan& plan, std::vector<int> ranks, int rank, int world);

  bool local(int node) const { return ranks[node] == rank; }
  int owner(const Target& t) const { return t.node < 0 ? 0 : ranks[t.node]; }  // graph outputs: rank 0

  std::vector<int> ranks;  // per plan node
  int rank = 0;            // this process's
  int local_nodes = 0;     // nodes this rank runs
  std::vector<int> sources;        // this rank's nodes without inputs: each invocation starts them
  std::vector<int> started_ranks;  // the ranks other than 0 that run nodes: each invocation starts there
  std::vector<int> unfed_ranks;    // those of them that read no value of rank 0's: started by a message
};

// The ranks the graph placed its nodes on (NodeRef::on_rank).
std::vector<int> ranks_of(const Plan& plan);

// `ranks` without the lost ones: each node of a lost rank moves to the live rank that runs the
// fewest nodes at that moment (the lowest of equals), so a lost rank's nodes spread over the
// survivors. The same answer on every rank for the same arguments.
std::vector<int> without_ranks(std::vector<int> ranks, const std::vector<uint8_t>& lost);

}  // namespace troupe::detail
