#include "dataflow/plan.h"

#include <algorithm>
#include <functional>
#include <set>

#include "devices/backend.h"

namespace troupe {

namespace {

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

// "h", "parts:1", "s:then.0": a node's output port as messages name it.
std::string port_label(const Node& node, const std::string& path, int index) {
  if (index < static_cast<int>(node.output_names.size())) return path + ":" + node.output_names[index];
  if (node.outputs == 1 && index == 0) return path;
  return path + ":" + std::to_string(index);
}

// Pure by what it is, or marked so.
bool pure_node(const Node& n) {
  return n.pure || std::visit(overloaded{
                                  [](const Node::Call&) { return false; },
                                  [](const Node::Module&) { return false; },
                                  [](const Node::Subgraph& sub) { return all_pure(*sub.body); },
                                  [](const Node::Loop& loop) { return all_pure(*loop.body); },
                                  [](const auto&) { return true; },
                              },
                              n.kind);
}

std::string meta_or_unknown(const std::optional<TensorMeta>& meta) { return meta ? meta->str() : "?"; }

// One graph (the top one or a sub-graph) inside the plan.
struct Scope {
  const Graph* graph = nullptr;
  std::string prefix;  // "" or "sub/"
  int parent = -1;     // scope index
  int owner = -1;      // the sub-graph node in the parent graph
  std::vector<int> plan_node;  // per graph node: plan node, or -1
  std::vector<int> child;      // per graph node: scope of a sub-graph node, or -1
  std::vector<int> ordinal;    // per graph node: position among inputs / outputs / constants id
  int rank = 0;                // where its nodes run unless placed themselves
  bool pure = false;           // a sub-graph node marked pure: all its nodes are
};

class Planner {
 public:
  Planner(const Graph& graph, const std::map<std::string, TensorMeta>& metas) : metas_(metas) {
    plan_.graph = graph.name();
    add_scope(graph, "", -1, -1);
    for (const auto& [name, meta] : metas)
      if (std::find(plan_.input_names.begin(), plan_.input_names.end(), name) == plan_.input_names.end())
        problem("a meta was given for " + in_quotes(name) + ", which is not an input of graph " + in_quotes(graph.name()));
  }

  Plan finish() {
    resolve_edges();
    if (sort_topologically()) infer_metas();
    return std::move(plan_);
  }

 private:
  void problem(std::string text) { plan_.problems.push_back(std::move(text)); }

  // Creates plan nodes for the graph's nodes (recursing into sub-graphs) and checks what can be
  // checked one node at a time.
  void add_scope(const Graph& graph, std::string prefix, int parent, int owner) {
    const int id = static_cast<int>(scopes_.size());
    int rank = 0;
    bool pure = false;
    if (parent >= 0) {
      const Node& sub = scopes_[parent].graph->node(owner);
      rank = sub.rank != 0 ? sub.rank : scopes_[parent].rank;
      pure = sub.pure || scopes_[parent].pure;
    }
    scopes_.push_back({&graph, prefix, parent, owner, {}, {}, {}, rank, pure});
    const auto& nodes = graph.nodes();
    std::vector<int> plan_node(nodes.size(), -1), child(nodes.size(), -1), ordinal(nodes.size(), -1);
    std::map<std::string, int> names, output_names;
    int inputs = 0, outputs = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const Node& n = nodes[i];
      const std::string path = prefix + n.name;
      if (!n.build_error.empty()) problem(prefix + n.build_error);
      if (n.name.find('/') != std::string::npos)
        problem("node " + in_quotes(path) + ": '/' is reserved for sub-graph paths");
      const bool is_output = n.is<Node::Output>();
      auto& seen = is_output ? output_names : names;
      if (auto [it, fresh] = seen.emplace(n.name, static_cast<int>(i)); !fresh)
        problem(std::string(is_output ? "duplicate output name " : "duplicate node name ") +
                in_quotes(path) + " (nodes " + std::to_string(it->second) + " and " + std::to_string(i) + ")");
      check_inputs(graph, prefix, n);
      std::visit(overloaded{
                     [&](const Node::Input& in) {
                       ordinal[i] = inputs++;
                       if (parent < 0) {
                         plan_.input_names.push_back(n.name);
                         auto given = metas_.find(n.name);
                         plan_.input_metas.push_back(given != metas_.end() ? std::optional(given->second) : in.meta);
                         plan_.input_consumers.emplace_back();
                       }
                     },
                     [&](const Node::Constant& c) {
                       ordinal[i] = static_cast<int>(plan_.constants.size());
                       plan_.constants.push_back(c.value);
                       plan_.constant_paths.push_back(path);
                       plan_.constant_consumers.emplace_back();
                     },
                     [&](const Node::Output&) { ordinal[i] = outputs++; },
                     [&](const Node::Subgraph& sub) {
                       if (sub.body->input_nodes().size() != n.inputs.size())
                         problem("sub-graph node " + in_quotes(path) + " has " + std::to_string(n.inputs.size()) +
                                 " inputs but graph " + in_quotes(sub.body->name()) + " declares " +
                                 std::to_string(sub.body->input_nodes().size()));
                     },
                     [&]<class K>(const K&) requires runs_as_plan_node<K> {
                       plan_node[i] = add_plan_node(n, path);
                       plan_.nodes[plan_node[i]].rank = n.rank != 0 ? n.rank : rank;
                       plan_.nodes[plan_node[i]].pure = pure || pure_node(n);
                     },
                 },
                 n.kind);
      if (n.rank < 0) problem("node " + in_quotes(path) + " is placed on rank " + std::to_string(n.rank));
    }
    if (outputs == 0) problem("graph " + in_quotes(prefix + graph.name()) + " has no outputs");
    scopes_[id].plan_node = std::move(plan_node);
    scopes_[id].ordinal = std::move(ordinal);
    for (size_t i = 0; i < nodes.size(); ++i)
      if (const auto* sub = nodes[i].as<Node::Subgraph>()) {
        child[i] = static_cast<int>(scopes_.size());
        add_scope(*sub->body, prefix + nodes[i].name + "/", id, static_cast<int>(i));
      }
    scopes_[id].child = std::move(child);
  }

  void check_inputs(const Graph& graph, const std::string& prefix, const Node& n) {
    const std::string path = prefix + n.name;
    for (size_t slot = 0; slot < n.inputs.size(); ++slot) {
      const Port& p = n.inputs[slot];
      const std::string where = "node " + in_quotes(path) + " input " + std::to_string(slot);
      if (!p.connected()) {
        problem(where + " is not connected");
      } else if (p.graph != graph.id() || p.node < 0 || p.node >= static_cast<int>(graph.nodes().size())) {
        problem(where + " comes from another graph");
      } else {
        const Node& from = graph.node(p.node);
        if (from.outputs >= 0 && p.index >= from.outputs)
          problem(where + " uses output " + std::to_string(p.index) + " of " + in_quotes(prefix + from.name) + " (" +
                  from.kind_name() + "), which has " + std::to_string(from.outputs) + " outputs");
      }
    }
  }

  int add_plan_node(const Node& n, const std::string& path) {
    PlanNode pn;
    pn.node = &n;
    pn.path = path;
    pn.outputs = n.outputs;
    pn.inputs.resize(n.inputs.size());
    if (const auto* op = n.as<Node::Op>()) {
      try {
        pn.def = &OpRegistry::global().get(op->op);
        pn.attrs = OpRegistry::global().complete_attrs(*pn.def, op->attrs);
      } catch (const Error& e) {
        problem("node " + in_quotes(path) + ": " + e.what());
        pn.def = nullptr;
      }
    }
    if (const auto* loop = n.as<Node::Loop>()) {
      int index = 0;
      for (int o : loop->body->output_nodes()) {
        if (loop->body->node(o).name == "continue") pn.continue_output = index;
        else ++pn.state_outputs;
        ++index;
      }
      if (loop->max_iterations < 0)
        problem("loop " + in_quotes(path) + ": max_iterations must be >= 0, got " + std::to_string(loop->max_iterations));
      const size_t body_inputs = loop->body->input_nodes().size();
      if (body_inputs != n.inputs.size() || static_cast<size_t>(pn.state_outputs) != n.inputs.size())
        problem("loop " + in_quotes(path) + " has " + std::to_string(n.inputs.size()) + " state values but its body " +
                in_quotes(loop->body->name()) + " takes " + std::to_string(body_inputs) + " inputs and gives " +
                std::to_string(pn.state_outputs) + " state outputs");
    }
    if (n.device && n.device->is_cuda()) {
      if (!has_backend(DeviceType::cuda))
        problem("node " + in_quotes(path) + " is placed on " + n.device->str() + ": " + cuda_unavailable_reason());
      else if (n.device->index >= backend(DeviceType::cuda).device_count())
        problem("node " + in_quotes(path) + " is placed on " + n.device->str() + ", but there are " +
                std::to_string(backend(DeviceType::cuda).device_count()) + " cuda devices");
    }
    plan_.nodes.push_back(std::move(pn));
    return static_cast<int>(plan_.nodes.size()) - 1;
  }

  // Follows inputs into parents and sub-graph outputs into children until a plan node, a graph
  // input or a constant. Sub-graph wiring alone can loop (an output fed back into its own
  // sub-graph's input): a bounded walk reports it.
  Source resolve(int scope, const Port& p, int steps = 0) {
    const Scope& s = scopes_[scope];
    const Graph& g = *s.graph;
    if (!p.connected() || p.graph != g.id() || p.node < 0 || p.node >= static_cast<int>(g.nodes().size())) return {};
    if (steps > 100000) {
      cyclic_wiring_ = true;
      return {};
    }
    return std::visit(
        overloaded{
            [&](const Node::Input&) -> Source {
              const int k = s.ordinal[p.node];
              if (s.parent < 0) return {Source::input, k, 0};
              const Node& owner = scopes_[s.parent].graph->node(s.owner);
              if (k >= static_cast<int>(owner.inputs.size())) return {};
              return resolve(s.parent, owner.inputs[k], steps + 1);
            },
            [&](const Node::Constant&) -> Source { return {Source::constant, s.ordinal[p.node], 0}; },
            [&](const Node::Subgraph& sub) -> Source {
              const auto outs = sub.body->output_nodes();
              if (p.index >= static_cast<int>(outs.size())) return {};
              return resolve(s.child[p.node], sub.body->node(outs[p.index]).inputs[0], steps + 1);
            },
            [](const Node::Output&) -> Source { return {}; },
            [&]<class K>(const K&) requires runs_as_plan_node<K> {
              return Source{Source::node, s.plan_node[p.node], p.index};
            },
        },
        g.node(p.node).kind);
  }

  std::vector<Target>& consumers_of(const Source& src) {
    if (src.kind == Source::input) return plan_.input_consumers[src.index];
    if (src.kind == Source::constant) return plan_.constant_consumers[src.index];
    auto& per_port = plan_.nodes[src.index].consumers;
    if (static_cast<int>(per_port.size()) <= src.port) per_port.resize(src.port + 1);
    return per_port[src.port];
  }

  void resolve_edges() {
    for (auto& pn : plan_.nodes)
      if (pn.outputs > 0) pn.consumers.resize(pn.outputs);
    for (size_t s = 0; s < scopes_.size(); ++s) {
      const Graph& g = *scopes_[s].graph;
      for (size_t i = 0; i < g.nodes().size(); ++i) {
        const Node& n = g.nodes()[i];
        const int pn = scopes_[s].plan_node[i];
        if (pn >= 0) {
          for (size_t slot = 0; slot < n.inputs.size(); ++slot) {
            Source src = resolve(static_cast<int>(s), n.inputs[slot]);
            plan_.nodes[pn].inputs[slot] = src;
            if (src.kind != Source::none) consumers_of(src).push_back({pn, static_cast<int>(slot)});
          }
        } else if (n.is<Node::Output>() && s == 0) {
          Source src = resolve(0, n.inputs[0]);
          const int k = static_cast<int>(plan_.output_names.size());
          plan_.output_names.push_back(n.name);
          plan_.output_sources.push_back(src);
          if (src.kind != Source::none) consumers_of(src).push_back({-1, k});
        }
      }
    }
    if (cyclic_wiring_) problem("graph " + in_quotes(plan_.graph) + ": a sub-graph's output feeds its own input directly");
  }

  // Kahn's algorithm; on a cycle, names the nodes around one of them.
  bool sort_topologically() {
    const size_t count = plan_.nodes.size();
    std::vector<int> waiting(count, 0);
    for (size_t i = 0; i < count; ++i)
      for (const Source& s : plan_.nodes[i].inputs)
        if (s.kind == Source::node) ++waiting[i];
    std::vector<int> ready;
    for (size_t i = 0; i < count; ++i)
      if (waiting[i] == 0) ready.push_back(static_cast<int>(i));
    while (!ready.empty()) {
      const int n = ready.back();
      ready.pop_back();
      plan_.order.push_back(n);
      for (const auto& targets : plan_.nodes[n].consumers)
        for (const Target& t : targets)
          if (t.node >= 0 && --waiting[t.node] == 0) ready.push_back(t.node);
    }
    if (plan_.order.size() == count) return true;
    // Walk inputs backwards from a node left waiting until a node repeats: that is a cycle.
    int at = 0;
    while (waiting[at] == 0) ++at;
    std::vector<int> walk;
    std::vector<int> seen_at(count, -1);
    while (seen_at[at] < 0) {
      seen_at[at] = static_cast<int>(walk.size());
      walk.push_back(at);
      for (const Source& s : plan_.nodes[at].inputs)
        if (s.kind == Source::node && waiting[s.index] > 0) {
          at = s.index;
          break;
        }
    }
    std::vector<int> cycle(walk.begin() + seen_at[at], walk.end());
    std::reverse(cycle.begin(), cycle.end());
    std::rotate(cycle.begin(), std::min_element(cycle.begin(), cycle.end()), cycle.end());  // from the first-made node
    std::string text = "cycle: ";
    for (int n : cycle) text += in_quotes(plan_.nodes[n].path) + " -> ";
    problem(text + in_quotes(plan_.nodes[cycle.front()].path));
    return false;
  }

  std::optional<TensorMeta> meta_of(const Source& s) const {
    switch (s.kind) {
      case Source::input: return plan_.input_metas[s.index];
      case Source::constant: return plan_.constants[s.index].meta();
      case Source::node: {
        const auto& m = metas_out_[s.index];
        return s.port < static_cast<int>(m.size()) ? m[s.port] : std::nullopt;
      }
      default: return std::nullopt;
    }
  }

  std::string source_label(const Source& s) const {
    switch (s.kind) {
      case Source::input: return plan_.input_names[s.index];
      case Source::constant: return plan_.constant_paths[s.index];
      case Source::node: return port_label(*plan_.nodes[s.index].node, plan_.nodes[s.index].path, s.port);
      default: return "?";
    }
  }

  std::string inputs_label(const PlanNode& pn, const std::vector<std::optional<TensorMeta>>& in) const {
    std::string text;
    for (size_t i = 0; i < in.size(); ++i)
      text += (i ? ", " : "") + source_label(pn.inputs[i]) + ":" + meta_or_unknown(in[i]);
    return text;
  }

  void infer_metas() {
    metas_out_.assign(plan_.nodes.size(), {});
    for (int id : plan_.order) {
      PlanNode& pn = plan_.nodes[id];
      const Node& n = *pn.node;
      std::vector<std::optional<TensorMeta>> in;
      bool all_known = true;
      for (const Source& s : pn.inputs) {
        in.push_back(meta_of(s));
        if (!in.back()) all_known = false;
        else if (n.device) in.back()->device = *n.device;
      }
      auto& out = metas_out_[id];
      const std::string head = n.kind_name() + std::string(" ") + in_quotes(pn.path);
      try {
        std::visit(
            overloaded{
                [&](const Node::Op&) {
                  if (!pn.def || !all_known) return;
                  std::vector<TensorMeta> known;
                  for (auto& m : in) known.push_back(*m);
                  for (auto& m : OpRegistry::global().infer(*pn.def, known, pn.attrs)) out.push_back(m);
                  pn.outputs = static_cast<int>(out.size());
                },
                [&](const Node::Call& call) {
                  if (!call.infer || !all_known) return;
                  std::vector<TensorMeta> known;
                  for (auto& m : in) known.push_back(*m);
                  for (auto& m : call.infer(known)) out.push_back(m);
                  if (static_cast<int>(out.size()) != pn.outputs)
                    problem(head + ": infer_with gave " + std::to_string(out.size()) + " metas for " +
                            std::to_string(pn.outputs) + " outputs");
                },
                [](const Node::Module&) {},  // module calls declare no metas
                [&](const Node::Switch&) {
                  if (in[0] && in[0]->shape.size() > 0 && numel(in[0]->shape) != 1)
                    problem(head + ": the predicate " + source_label(pn.inputs[0]) + " is " + in[0]->str() +
                            "; it must have one element");
                  for (int branch = 0; branch < 2; ++branch)
                    for (size_t i = 1; i < in.size(); ++i) out.push_back(in[i]);
                },
                [&](const Node::Merge& merge) {
                  const int k = merge.width;
                  for (int j = 0; j < k; ++j) {
                    std::optional<TensorMeta> first;
                    int first_branch = 0;
                    for (int b = 0; b * k + j < static_cast<int>(in.size()); ++b) {
                      const auto& m = in[b * k + j];
                      if (!m) continue;
                      if (!first) {
                        first = m;
                        first_branch = b;
                      } else if (*m != *first) {
                        problem(head + " output " + std::to_string(j) + ": branch " + std::to_string(first_branch) +
                                " gives " + first->str() + " but branch " + std::to_string(b) + " gives " + m->str());
                      }
                    }
                    out.push_back(first);
                  }
                },
                [&](const Node::Loop& loop) { infer_loop(pn, *loop.body, in, head, out); },
                []<class K>(const K&) requires(!runs_as_plan_node<K>) {},
            },
            n.kind);
      } catch (const std::exception& e) {
        problem(head + " (" + what_runs(n) + ") on inputs " + inputs_label(pn, in) +
                ": " + e.what());
      }
    }
    // Ports of ops are counted only now: check the uses.
    for (const PlanNode& pn : plan_.nodes)
      for (size_t slot = 0; slot < pn.inputs.size(); ++slot) {
        const Source& s = pn.inputs[slot];
        if (s.kind != Source::node) continue;
        const PlanNode& from = plan_.nodes[s.index];
        if (from.node->outputs < 0 && from.outputs >= 0 && s.port >= from.outputs)
          problem("node " + in_quotes(pn.path) + " input " + std::to_string(slot) + " uses output " +
                  std::to_string(s.port) + " of " + in_quotes(from.path) + " (" + what_runs(*from.node) + "), which has " +
                  std::to_string(from.outputs) + " outputs");
      }
    for (const Source& s : plan_.output_sources) plan_.output_metas.push_back(meta_of(s));
  }

  void infer_loop(const PlanNode& pn, const Graph& body, const std::vector<std::optional<TensorMeta>>& in,
                  const std::string& head, std::vector<std::optional<TensorMeta>>& out) {
    std::map<std::string, TensorMeta> body_metas;
    const auto body_inputs = body.input_nodes();
    for (size_t i = 0; i < body_inputs.size() && i < in.size(); ++i)
      if (in[i]) body_metas[body.node(body_inputs[i]).name] = *in[i];
    Plan inner = make_plan(body, body_metas);
    for (const auto& p : inner.problems) problem(head + " body: " + p);
    if (!inner.problems.empty()) return;
    int state = 0;
    for (size_t k = 0; k < inner.output_names.size(); ++k) {
      const auto& m = inner.output_metas[k];
      if (static_cast<int>(k) == pn.continue_output) {
        if (m && numel(m->shape) != 1)
          problem(head + ": the body's \"continue\" output is " + m->str() + "; it must have one element");
        continue;
      }
      if (state < static_cast<int>(in.size()) && m && in[state] && *m != *in[state])
        problem(head + ": state " + std::to_string(state) + " enters as " + in[state]->str() + " but the body " +
                "gives back " + m->str() + " (" + in_quotes(inner.output_names[k]) + ")");
      out.push_back(in.size() > static_cast<size_t>(state) ? in[state] : m);
      ++state;
    }
  }

  const std::map<std::string, TensorMeta>& metas_;
  Plan plan_;
  std::vector<Scope> scopes_;
  std::vector<std::vector<std::optional<TensorMeta>>> metas_out_;
  bool cyclic_wiring_ = false;
};

}  // namespace

std::string what_runs(const Node& node) {
  const auto* op = node.as<Node::Op>();
  return op ? op->op : node.kind_name();
}

bool all_pure(const Graph& graph) {
  return std::all_of(graph.nodes().begin(), graph.nodes().end(), pure_node);
}

Plan make_plan(const Graph& graph, const std::map<std::string, TensorMeta>& input_metas) {
  return Planner(graph, input_metas).finish();
}

}  // namespace troupe
