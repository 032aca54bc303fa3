#include "dataflow/graph.h"

#include <atomic>
#include <sstream>

#include "dataflow/plan.h"
#include "devices/error_kinds.h"

namespace troupe {

namespace {

std::atomic<uint64_t> next_graph_id{1};

std::string numbered(const std::string& stem, int i) { return stem + "." + std::to_string(i); }

}  // namespace

GraphError::GraphError(const std::string& graph, std::vector<std::string> problems)
    : ValueError([&] {
        std::string text = "graph '" + graph + "' is invalid (" + std::to_string(problems.size()) + " problem" +
                           (problems.size() == 1 ? "" : "s") + "):";
        for (const auto& p : problems) text += "\n  " + p;
        return text;
      }()),
      problems_(std::move(problems)) {}

// Problems are the message's indented lines, as the first constructor wrote them.
GraphError::GraphError(const std::string& message) : ValueError(message) {
  for (size_t at = message.find("\n  "); at != std::string::npos;) {
    const size_t next = message.find("\n  ", at + 3);
    problems_.push_back(message.substr(at + 3, next == std::string::npos ? std::string::npos : next - at - 3));
    at = next;
  }
}

static ErrorKindRegistrar<GraphError> graph_error_kind;

const char* Node::kind_name() const {
  return std::visit([](const auto& k) { return k.kind_name; }, kind);
}

Port NodeRef::operator[](int index) const {
  const Node& n = graph_->node(node_);
  if (index < 0 || (n.outputs >= 0 && index >= n.outputs))
    throw IndexError("node '" + n.name + "' has " + std::to_string(n.outputs) + " outputs; no output " +
                     std::to_string(index));
  return {graph_->id(), node_, index};
}

Port NodeRef::out(std::string_view output) const {
  const Node& n = graph_->node(node_);
  for (size_t i = 0; i < n.output_names.size(); ++i)
    if (n.output_names[i] == output) return {graph_->id(), node_, static_cast<int>(i)};
  std::string known;
  for (const auto& o : n.output_names) known += (known.empty() ? "" : ", ") + o;
  throw ValueError("node '" + n.name + "' has no output named '" + std::string(output) + "' (outputs: " +
                   (known.empty() ? "unnamed" : known) + ")");
}

NodeRef& NodeRef::named(std::string name) {
  graph_->mutable_node(node_).name = std::move(name);
  return *this;
}

NodeRef& NodeRef::on(Device device) {
  graph_->mutable_node(node_).device = device;
  return *this;
}

NodeRef& NodeRef::on_rank(int rank) {
  graph_->mutable_node(node_).rank = rank;
  return *this;
}

NodeRef& NodeRef::pure(bool pure) {
  graph_->mutable_node(node_).pure = pure;
  return *this;
}

NodeRef& NodeRef::infer_with(MetaFn infer) {
  Node& n = graph_->mutable_node(node_);
  auto* call = std::get_if<Node::Call>(&n.kind);
  if (!call) throw ValueError("infer_with: node '" + n.name + "' is not a call node");
  call->infer = std::move(infer);
  return *this;
}

const std::string& NodeRef::name() const { return graph_->node(node_).name; }

Graph::Graph(std::string name) : name_(std::move(name)), id_(next_graph_id.fetch_add(1)) {}

int Graph::add(Node node, const std::string& stem) {
  const int id = static_cast<int>(nodes_.size());
  if (node.name.empty()) node.name = stem + "_" + std::to_string(id);
  nodes_.push_back(std::move(node));
  return id;
}

std::vector<int> Graph::input_nodes() const {
  std::vector<int> ids;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].is<Node::Input>()) ids.push_back(static_cast<int>(i));
  return ids;
}

std::vector<int> Graph::output_nodes() const {
  std::vector<int> ids;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].is<Node::Output>()) ids.push_back(static_cast<int>(i));
  return ids;
}

Port Graph::input(std::string name, std::optional<TensorMeta> meta) {
  Node n;
  n.kind = Node::Input{std::move(meta)};
  n.name = std::move(name);
  return {id_, add(std::move(n), "input"), 0};
}

Port Graph::constant(std::string name, Value value) {
  Node n;
  n.kind = Node::Constant{std::move(value)};
  n.name = std::move(name);
  return {id_, add(std::move(n), "constant"), 0};
}

NodeRef Graph::op(std::string op, std::vector<Port> inputs, Attrs attrs, std::string name) {
  Node n;
  const std::string stem = op;
  n.kind = Node::Op{std::move(op), std::move(attrs)};
  n.name = std::move(name);
  n.inputs = std::move(inputs);
  n.outputs = -1;
  return NodeRef(*this, add(std::move(n), stem));
}

NodeRef Graph::call_values(std::string name, ValueFn fn, std::vector<Port> inputs, int outputs) {
  Node n;
  n.kind = Node::Call{std::move(fn), {}};
  n.name = std::move(name);
  n.inputs = std::move(inputs);
  n.outputs = outputs;
  return NodeRef(*this, add(std::move(n), "call"));
}

NodeRef Graph::subgraph(std::string name, const Graph& body, std::vector<Port> inputs) {
  Node n;
  n.kind = Node::Subgraph{std::make_shared<const Graph>(body)};
  n.name = std::move(name);
  n.inputs = std::move(inputs);
  for (int o : body.output_nodes()) n.output_names.push_back(body.node(o).name);
  n.outputs = static_cast<int>(n.output_names.size());
  return NodeRef(*this, add(std::move(n), "subgraph"));
}

NodeRef Graph::switch_(std::string name, Port pred, std::vector<Port> data) {
  Node n;
  const int width = static_cast<int>(data.size());
  n.kind = Node::Switch{width};
  n.name = std::move(name);
  n.inputs.push_back(pred);
  n.inputs.insert(n.inputs.end(), data.begin(), data.end());
  for (int i = 0; i < width; ++i) n.output_names.push_back(numbered("then", i));
  for (int i = 0; i < width; ++i) n.output_names.push_back(numbered("else", i));
  n.outputs = 2 * width;
  return NodeRef(*this, add(std::move(n), "switch"));
}

NodeRef Graph::merge(std::string name, std::vector<std::vector<Port>> branches) {
  Node n;
  const int width = branches.empty() ? 0 : static_cast<int>(branches[0].size());
  n.kind = Node::Merge{width};
  n.name = std::move(name);
  for (size_t b = 0; b < branches.size(); ++b) {
    if (static_cast<int>(branches[b].size()) != width && n.build_error.empty())
      n.build_error = "merge '" + n.name + "': branch 0 has " + std::to_string(width) + " values but branch " +
                      std::to_string(b) + " has " + std::to_string(branches[b].size());
    n.inputs.insert(n.inputs.end(), branches[b].begin(), branches[b].end());
  }
  if (branches.size() < 2) n.build_error = "merge '" + n.name + "' needs at least two branches";
  n.outputs = width;
  return NodeRef(*this, add(std::move(n), "merge"));
}

NodeRef Graph::cond(std::string name, Port pred, const Graph& then_body, const Graph& else_body,
                    std::vector<Port> inputs) {
  const int k = static_cast<int>(inputs.size());
  NodeRef sw = switch_(name + ".switch", pred, std::move(inputs));
  std::vector<Port> then_in, else_in;
  for (int i = 0; i < k; ++i) {
    then_in.push_back(sw[i]);
    else_in.push_back(sw[k + i]);
  }
  NodeRef then_node = subgraph(name + ".then", then_body, then_in);
  NodeRef else_node = subgraph(name + ".else", else_body, else_in);
  std::vector<std::vector<Port>> branches(2);
  for (int i = 0; i < node(then_node.id()).outputs; ++i) branches[0].push_back(then_node[i]);
  for (int i = 0; i < node(else_node.id()).outputs; ++i) branches[1].push_back(else_node[i]);
  const size_t then_outputs = branches[0].size(), else_outputs = branches[1].size();
  NodeRef merged = merge(std::move(name), std::move(branches));
  Node& m = mutable_node(merged.id());
  if (!m.build_error.empty())
    m.build_error = "cond '" + m.name + "': graph '" + then_body.name() + "' gives " + std::to_string(then_outputs) +
                    " outputs but graph '" + else_body.name() + "' gives " + std::to_string(else_outputs);
  else
    m.output_names = node(then_node.id()).output_names;
  return merged;
}

NodeRef Graph::loop(std::string name, const Graph& body, std::vector<Port> inputs, int64_t max_iterations) {
  Node n;
  n.kind = Node::Loop{std::make_shared<const Graph>(body), max_iterations};
  n.name = std::move(name);
  n.outputs = static_cast<int>(inputs.size());
  n.inputs = std::move(inputs);
  for (int o : body.output_nodes())
    if (body.node(o).name != "continue") n.output_names.push_back(body.node(o).name);
  if (static_cast<int>(n.output_names.size()) != n.outputs) n.output_names.clear();  // validation reports it
  return NodeRef(*this, add(std::move(n), "loop"));
}

void Graph::output(std::string name, Port port) {
  Node n;
  n.kind = Node::Output{};
  n.name = std::move(name);
  n.inputs = {port};
  n.outputs = 0;
  add(std::move(n), "output");
}

void Graph::connect(Port from, NodeRef to, int input) {
  Node& n = mutable_node(to.id());
  if (input < 0 || input >= static_cast<int>(n.inputs.size()))
    throw IndexError("connect: node '" + n.name + "' has " + std::to_string(n.inputs.size()) + " inputs; no input " +
                     std::to_string(input));
  if (n.inputs[input].connected())
    throw ValueError("connect: input " + std::to_string(input) + " of node '" + n.name + "' is already connected");
  n.inputs[input] = from;
}

std::vector<std::string> Graph::check(const std::map<std::string, TensorMeta>& input_metas) const {
  return make_plan(*this, input_metas).problems;
}

void Graph::validate(const std::map<std::string, TensorMeta>& input_metas) const {
  auto problems = check(input_metas);
  if (!problems.empty()) throw GraphError(name_, std::move(problems));
}

std::map<std::string, std::optional<TensorMeta>> Graph::output_metas(
    const std::map<std::string, TensorMeta>& input_metas) const {
  Plan plan = make_plan(*this, input_metas);
  if (!plan.problems.empty()) throw GraphError(name_, std::move(plan.problems));
  std::map<std::string, std::optional<TensorMeta>> out;
  for (size_t k = 0; k < plan.output_names.size(); ++k) out[plan.output_names[k]] = plan.output_metas[k];
  return out;
}

namespace {

std::string escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// The label under a node's name (the kind, or what it runs) and its shape.
struct DotLook {
  std::string detail;
  const char* shape;
};

DotLook dot_look(const Node& n) {
  return std::visit(
      overloaded{
          [&](const Node::Input& in) { return DotLook{in.meta ? "\\n" + in.meta->str() : "", "invhouse"}; },
          [](const Node::Output&) { return DotLook{"", "house"}; },
          [](const Node::Constant&) { return DotLook{"\\nconstant", "note"}; },
          [](const Node::Op& op) { return DotLook{"\\n" + escaped(op.op), "box"}; },
          [](const Node::Call&) { return DotLook{"\\ncall", "box\" style=\"rounded"}; },
          [](const Node::Module& m) { return DotLook{"\\nmodule " + escaped(m.module), "box3d"}; },
          [](const Node::Subgraph&) { return DotLook{"\\nsubgraph", "box"}; },  // drawn as a cluster
          [](const Node::Switch&) { return DotLook{"\\nswitch", "diamond"}; },
          [](const Node::Merge&) { return DotLook{"\\nmerge", "invtriangle"}; },
          [](const Node::Loop& loop) {
            return DotLook{"\\nloop " + escaped(loop.body->name()) + " (max " + std::to_string(loop.max_iterations) + ")",
                           "doubleoctagon"};
          },
      },
      n.kind);
}

// Writes one graph's nodes (sub-graphs as clusters) and edges; ids are prefix + node index.
void write_dot(std::ostringstream& out, const Graph& g, const std::string& prefix, const std::string& indent) {
  auto id = [&](int node) { return prefix + std::to_string(node); };
  // Where an edge from port p really starts: a sub-graph's output port is its inner output node.
  std::function<std::string(const Graph&, const std::string&, const Port&)> from_id =
      [&](const Graph& graph, const std::string& pre, const Port& p) -> std::string {
    const auto* sub = graph.node(p.node).as<Node::Subgraph>();
    if (!sub) return pre + std::to_string(p.node);
    const auto outs = sub->body->output_nodes();
    return pre + std::to_string(p.node) + "_" + std::to_string(outs.at(p.index));
  };
  const auto& nodes = g.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (const auto* sub = n.as<Node::Subgraph>()) {
      out << indent << "subgraph cluster_" << id(static_cast<int>(i)) << " {\n"
          << indent << "  label=\"" << escaped(n.name + " (graph " + sub->body->name() + ")") << "\";\n";
      write_dot(out, *sub->body, id(static_cast<int>(i)) + "_", indent + "  ");
      out << indent << "}\n";
      continue;
    }
    const DotLook look = dot_look(n);
    std::string label = escaped(n.name) + look.detail;
    if (n.device) label += "\\n@" + n.device->str();
    if (n.rank != 0) label += "\\n@rank " + std::to_string(n.rank);
    out << indent << id(static_cast<int>(i)) << " [label=\"" << label << "\" shape=\"" << look.shape << "\"];\n";
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    for (size_t slot = 0; slot < n.inputs.size(); ++slot) {
      const Port& p = n.inputs[slot];
      if (p.graph != g.id() || p.node < 0 || p.node >= static_cast<int>(nodes.size())) continue;
      const Node& from = nodes[p.node];
      const auto* from_sub = from.as<Node::Subgraph>();
      if (from_sub && p.index >= static_cast<int>(from_sub->body->output_nodes().size())) continue;
      std::string to = id(static_cast<int>(i));
      if (const auto* sub = n.as<Node::Subgraph>()) {
        const auto ins = sub->body->input_nodes();
        if (slot >= ins.size()) continue;
        to += "_" + std::to_string(ins[slot]);
      }
      out << indent << from_id(g, prefix, p) << " -> " << to;
      if (p.index < static_cast<int>(from.output_names.size()))
        out << " [label=\"" << escaped(from.output_names[p.index]) << "\"]";
      else if (from.outputs > 1)
        out << " [label=\"" << p.index << "\"]";
      out << ";\n";
    }
  }
}

}  // namespace

std::string Graph::to_dot() const {
  std::ostringstream out;
  out << "digraph \"" << escaped(name_) << "\" {\n  node [fontname=\"Helvetica\"];\n";
  write_dot(out, *this, "n", "  ");
  out << "}\n";
  return out.str();
}

}  // namespace troupe
