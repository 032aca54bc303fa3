#pragma once
// Plan: a Graph checked and flattened for running. Sub-graphs are inlined (their nodes named
// "sub/node"), graph inputs and constants resolved to where they are read, and every node
// knows, per output port, which node inputs (or graph outputs) consume it. What validation
// and the Executor share; users see Graph::check/validate and Executor.
//
//   Plan plan = make_plan(graph, {{"x", TensorMeta{DType::f32, {2, 3}}}});
//   if (!plan.problems.empty()) throw GraphError(graph.name(), plan.problems);
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "dataflow/graph.h"
#include "devices/registry.h"

namespace troupe {

// Node kinds make_plan resolves away: inputs and constants become Sources, sub-graphs are
// inlined and outputs become the plan's outputs. Nodes of every other kind are plan nodes.
template <class K>
inline constexpr bool runs_as_plan_node = !(std::is_same_v<K, Node::Input> || std::is_same_v<K, Node::Constant> ||
                                           std::is_same_v<K, Node::Subgraph> || std::is_same_v<K, Node::Output>);

// Every node of the graph (sub-graphs and loop bodies included) is pure (NodeRef::pure).
bool all_pure(const Graph& graph);

// What a node runs, as errors and the profiler name it: the op of an op node, else its kind.
std::string what_runs(const Node& node);

// Where a node input's value comes from.
struct Source {
  enum Kind : uint8_t { none, node, input, constant };
  Kind kind = none;
  int index = -1;  // plan node, graph input or constant
  int port = 0;
};

// Who reads a value: input `slot` of plan node `node`, or graph output `slot` when node is -1.
struct Target {
  int node = -1;
  int slot = 0;
};

struct PlanNode {
  const Node* node = nullptr;  // owned by the graph (or a sub-graph) the plan was made from
  std::string path;            // "h", "encoder/h"
  std::vector<Source> inputs;
  int outputs = -1;  // -1 while unknown (an op whose input metas are unknown)
  std::vector<std::vector<Target>> consumers;  // per output port
  const OpDef* def = nullptr;                  // op nodes
  Attrs attrs;                                 // op nodes: completed with defaults
  int state_outputs = 0;                       // loop nodes: body outputs that are state
  int continue_output = -1;                    // loop nodes: the body's "continue" output, if any
  int rank = 0;                                // its own, else its sub-graph's
  bool pure = false;  // may run again elsewhere (an op, switch or merge; else marked, or its sub-graph)
};

struct Plan {
  std::string graph;
  std::vector<PlanNode> nodes;
  std::vector<int> order;  // nodes in topological order (all of them when acyclic)
  std::vector<std::string> input_names;
  std::vector<std::optional<TensorMeta>> input_metas;
  std::vector<std::vector<Target>> input_consumers;
  std::vector<Value> constants;
  std::vector<std::string> constant_paths;
  std::vector<std::vector<Target>> constant_consumers;
  std::vector<std::string> output_names;
  std::vector<Source> output_sources;
  std::vector<std::optional<TensorMeta>> output_metas;
  std::vector<std::string> problems;
};

Plan make_plan(const Graph& graph, const std::map<std::string, TensorMeta>& input_metas = {});

}  // namespace troupe
