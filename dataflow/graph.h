#pragma once
// Graph: a dataflow graph composed in C++. Nodes are registered ops, C++ callables, module
// actors, other graphs, and control (switch/merge, cond, bounded loop); edges carry Values
// (tensors and other movable values) from a node's output port to another node's input.
//
//   Graph g("mlp");
//   Port x = g.input("x", TensorMeta{DType::f32, {8, 16}});
//   Port w = g.constant("w", weight);                         // f32[32,16]
//   Port h = g.op("matmul", {x, w}, {{"transpose_b", true}}).named("h");
//   Port y = g.call("post", [](const Tensor& t) { return relu(t); }, {h});
//   g.output("y", y);
//   g.validate();                 // GraphError listing every problem, with node and port names
//   std::string dot = g.to_dot(); // Graphviz
//
// Control: switch_ routes values to its "then" or "else" outputs by a runtime predicate; the
// untaken side carries a dead token that skips every node it reaches until a merge, which
// forwards its live branch (cond() builds switch + two sub-graphs + merge). loop() reruns a
// body graph on its state up to max_iterations times, while the body's "continue" output is true.
// A Port{} input is left unconnected, to be wired later with connect() (which can make cycles:
// validation reports them). Run graphs with Executor (dataflow/executor.h).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "actors/module_actor.h"
#include "dataflow/value.h"
#include "devices/attrs.h"
#include "devices/tensor.h"

namespace troupe {

class Graph;

// Every problem validation found, one line each, naming the nodes and ports involved.
class GraphError : public ValueError {
 public:
  GraphError(const std::string& graph, std::vector<std::string> problems);
  // The error rebuilt from its message (another rank's, or with context): problems read back.
  explicit GraphError(const std::string& message);
  TROUPE_ERROR_KIND(GraphError)
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::vector<std::string> problems_;
};

// One output of one node: where edges start.
struct Port {
  uint64_t graph = 0;  // the id of the graph that made it; 0: unconnected
  int node = -1;
  int index = 0;
  bool connected() const { return graph != 0; }
};

using ValueFn = std::function<std::vector<Value>(const std::vector<Value>&)>;
using MetaFn = std::function<std::vector<TensorMeta>(const std::vector<TensorMeta>&)>;

// A node: what every node has, and its kind with what only that kind has. Code that treats the
// kinds differently visits `kind` with one overload per kind (overloaded, below), so the
// compiler names every place a new kind must be handled.
struct Node {
  struct Input {
    static constexpr const char* kind_name = "input";
    std::optional<TensorMeta> meta;  // declared; validation and run() check it
  };
  struct Constant {
    static constexpr const char* kind_name = "constant";
    Value value;
  };
  struct Op {
    static constexpr const char* kind_name = "op";
    std::string op;  // the registered op
    Attrs attrs;
  };
  struct Call {
    static constexpr const char* kind_name = "call";
    ValueFn fn;
    MetaFn infer;  // optional shape inference (NodeRef::infer_with)
  };
  struct Module {
    static constexpr const char* kind_name = "module";
    std::string module;                  // the module's name
    ValueFn fn;                          // (*m)(tensors...)
    std::shared_ptr<ModuleQueue> queue;  // calls run in the module's actor, in order
  };
  struct Subgraph {
    static constexpr const char* kind_name = "subgraph";
    std::shared_ptr<const Graph> body;
  };
  struct Switch {
    static constexpr const char* kind_name = "switch";
    int width = 0;  // values routed: outputs are width "then" ports, then width "else" ports
  };
  struct Merge {
    static constexpr const char* kind_name = "merge";
    int width = 0;  // values per branch
  };
  struct Loop {
    static constexpr const char* kind_name = "loop";
    std::shared_ptr<const Graph> body;
    int64_t max_iterations = 0;
  };
  struct Output {
    static constexpr const char* kind_name = "output";
  };
  using Kind = std::variant<Input, Constant, Op, Call, Module, Subgraph, Switch, Merge, Loop, Output>;

  Kind kind;
  std::string name;
  std::vector<Port> inputs;
  int outputs = 1;                        // -1 for ops: known after shape inference
  std::vector<std::string> output_names;  // when the ports have names (sub-graphs, loops, switches)
  std::optional<Device> device;           // placement; none: where the inputs are
  int rank = 0;                           // the process-group rank it runs on (see Executor)
  bool pure = false;                      // NodeRef::pure: may run again, elsewhere, with the same result
  std::string build_error;                // a problem seen while building, reported by validate()

  template <class K>
  bool is() const { return std::holds_alternative<K>(kind); }
  template <class K>
  const K* as() const { return std::get_if<K>(&kind); }
  const char* kind_name() const;  // "op", "switch", ...
};

// std::visit(overloaded{[](const Node::Op& op) {...}, ...}, node.kind): one lambda per kind.
template <class... F>
struct overloaded : F... {
  using F::operator()...;
};

class NodeRef {
 public:
  NodeRef(Graph& graph, int node) : graph_(&graph), node_(node) {}
  operator Port() const { return (*this)[0]; }
  Port operator[](int index) const;
  Port out(std::string_view name) const;  // a named output port; ValueError when there is none
  NodeRef& named(std::string name);
  NodeRef& on(Device device);            // run here: tensor inputs are moved with Tensor::to
  NodeRef& on_rank(int rank);            // run in that rank of the executor's process group
  // Says that running this node again with the same inputs, on any rank, gives the same outputs
  // and harms nothing (no outside effect that must happen once). Ops, switches and merges are
  // pure already; a call, module, sub-graph (all its nodes) or loop (its body) is pure when marked.
  // An executor over ranks whose nodes are all pure heals when a rank is lost (executor.h).
  NodeRef& pure(bool pure = true);
  NodeRef& infer_with(MetaFn infer);     // call nodes: output metas from input metas
  const std::string& name() const;
  int id() const { return node_; }

 private:
  Graph* graph_;
  int node_;
};

class Graph {
 public:
  explicit Graph(std::string name = "graph");

  const std::string& name() const { return name_; }
  uint64_t id() const { return id_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(int id) const { return nodes_.at(static_cast<size_t>(id)); }
  std::vector<int> input_nodes() const;   // in declaration order
  std::vector<int> output_nodes() const;  // in declaration order

  // A graph input; with a meta, validation infers shapes from it (and run() checks it).
  Port input(std::string name, std::optional<TensorMeta> meta = std::nullopt);
  Port constant(std::string name, Value value);
  NodeRef op(std::string op, std::vector<Port> inputs, Attrs attrs = {}, std::string name = "");
  // fn takes one argument per input (Tensor, or any type the edge carries) and returns a value,
  // a std::tuple of values (one per output), void, or std::vector<Value> (see call_values).
  template <class Fn>
  NodeRef call(std::string name, Fn fn, std::vector<Port> inputs);
  NodeRef call_values(std::string name, ValueFn fn, std::vector<Port> inputs, int outputs = 1);
  // A call of the module in its actor, ordered with the module's other calls: (*m)(tensors...).
  template <class M>
  NodeRef module(std::string name, ModuleActor<M>& module, std::vector<Port> inputs);
  // Another graph as one node: inputs and outputs in the order body declared them.
  NodeRef subgraph(std::string name, const Graph& body, std::vector<Port> inputs);
  // Outputs "then.i" (ports 0..k-1) carry data[i] when pred is true, "else.i" (ports k..2k-1)
  // when false. pred: a bool or a one-element tensor (nonzero is true).
  NodeRef switch_(std::string name, Port pred, std::vector<Port> data);
  // Forwards the one branch whose values are live (the first, should several be).
  NodeRef merge(std::string name, std::vector<std::vector<Port>> branches);
  // then_body(inputs) if pred else else_body(inputs): a switch, two sub-graphs, and the merge returned.
  NodeRef cond(std::string name, Port pred, const Graph& then_body, const Graph& else_body, std::vector<Port> inputs);
  // Runs body on the state (inputs) again and again, up to max_iterations times, stopping after
  // an iteration whose "continue" output (optional, a bool) is false; outputs the final state.
  // body: one input per state value, outputs: the next state in the same order, plus "continue".
  NodeRef loop(std::string name, const Graph& body, std::vector<Port> inputs, int64_t max_iterations);
  void output(std::string name, Port port);
  // Wires an input left as Port{} when node was made.
  void connect(Port from, NodeRef to, int input);

  // Every problem, in node order; empty when the graph can run. Input metas given here win
  // over the declared ones.
  std::vector<std::string> check(const std::map<std::string, TensorMeta>& input_metas = {}) const;
  void validate(const std::map<std::string, TensorMeta>& input_metas = {}) const;  // GraphError
  // Validates, then returns each output's meta (none where unknown: a call without infer_with).
  std::map<std::string, std::optional<TensorMeta>> output_metas(
      const std::map<std::string, TensorMeta>& input_metas = {}) const;
  std::string to_dot() const;

 private:
  friend class NodeRef;
  Node& mutable_node(int id) { return nodes_.at(static_cast<size_t>(id)); }
  int add(Node node, const std::string& prefix);

  std::string name_;
  uint64_t id_;
  std::vector<Node> nodes_;
};

namespace detail {

template <class T>
std::vector<Value> to_values(T&& result) {
  using R = std::decay_t<T>;
  if constexpr (std::is_same_v<R, std::vector<Value>>) {
    return std::forward<T>(result);
  } else {
    return {Value(std::forward<T>(result))};
  }
}

template <class... T>
std::vector<Value> to_values(std::tuple<T...>&& result) {
  return std::apply([](auto&&... v) { return std::vector<Value>{Value(std::move(v))...}; }, std::move(result));
}

template <class R>
constexpr int output_count() {
  if constexpr (std::is_void_v<R>) return 0;
  else if constexpr (requires { std::tuple_size<R>::value; }) return static_cast<int>(std::tuple_size_v<R>);
  else return 1;
}

template <class Fn, class R, class... Args, size_t... I>
ValueFn adapt_call(Fn fn, std::index_sequence<I...>) {
  return [fn = std::move(fn)](const std::vector<Value>& in) mutable -> std::vector<Value> {
    if constexpr (std::is_void_v<R>) {
      fn(in[I].template get<std::decay_t<Args>>()...);
      return {};
    } else {
      return to_values(fn(in[I].template get<std::decay_t<Args>>()...));
    }
  };
}

template <class Fn, class R, class... Args>
std::pair<ValueFn, int> adapt(Fn fn, std::function<R(Args...)>*) {
  return {adapt_call<Fn, R, Args...>(std::move(fn), std::index_sequence_for<Args...>{}), static_cast<int>(sizeof...(Args))};
}

template <class M, size_t... I>
ValueFn module_call(std::shared_ptr<M> object, std::index_sequence<I...>) {
  return [object = std::move(object)](const std::vector<Value>& in) {
    return to_values((*object)(in[I].tensor()...));
  };
}

template <class M, size_t... I>
constexpr bool callable_with_tensors(std::index_sequence<I...>) {
  return std::is_invocable_v<M&, decltype((void)I, std::declval<const Tensor&>())...>;
}

template <class M, size_t K>
ValueFn module_call_if_callable(const std::shared_ptr<M>& object) {
  if constexpr (callable_with_tensors<M>(std::make_index_sequence<K>{})) {
    return module_call(object, std::make_index_sequence<K>{});
  } else {
    return {};
  }
}

// (*m)(tensors...) with `arity` tensors, when M can be called that way; empty otherwise.
template <class M, size_t... K>
ValueFn module_fn(const std::shared_ptr<M>& object, size_t arity, std::index_sequence<K...>) {
  ValueFn fn;
  ((arity == K ? (void)(fn = module_call_if_callable<M, K>(object)) : void()), ...);
  return fn;
}

}  // namespace detail

template <class Fn>
NodeRef Graph::call(std::string name, Fn fn, std::vector<Port> inputs) {
  if constexpr (std::is_invocable_r_v<std::vector<Value>, Fn&, const std::vector<Value>&>) {
    return call_values(std::move(name), std::move(fn), std::move(inputs));
  } else {
    using Signature = decltype(std::function{fn});
    using R = typename Signature::result_type;
    auto [wrapped, arity] = detail::adapt(std::move(fn), static_cast<Signature*>(nullptr));
    const size_t given = inputs.size();
    NodeRef ref = call_values(std::move(name), std::move(wrapped), std::move(inputs), detail::output_count<R>());
    if (static_cast<size_t>(arity) != given)
      mutable_node(ref.id()).build_error = "call node '" + ref.name() + "' takes " + std::to_string(arity) +
                                   " arguments but has " + std::to_string(given) + " inputs";
    return ref;
  }
}

template <class M>
NodeRef Graph::module(std::string name, ModuleActor<M>& module, std::vector<Port> inputs) {
  const size_t arity = inputs.size();
  ValueFn fn = detail::module_fn(module.shared_object(), arity, std::index_sequence<1, 2, 3, 4>{});
  Node n;
  n.name = std::move(name);
  n.inputs = std::move(inputs);
  if (!fn)
    n.build_error = "module node '" + n.name + "': module '" + module.name() + "' cannot be called with " +
                    std::to_string(arity) + " tensors";
  n.kind = Node::Module{module.name(), std::move(fn), module.queue()};
  return NodeRef(*this, add(std::move(n), "module"));
}

}  // namespace troupe
