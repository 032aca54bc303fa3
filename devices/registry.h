#pragma once
// The op registry: one table from op name to attribute schema, shape/dtype inference and one
// kernel per device type. The typed functions in ops.h, dataflow nodes, the models and the
// `troupe op` command all run ops through it.
//
// Defining an op: once, under devices/op_defs/ (the shared library runs registrars as it loads):
//
//   static OpRegistrar neg_op{OpDef{
//       .name = "neg", .doc = "-x elementwise",
//       .infer = [](const OpInfer& c) { return std::vector<TensorMeta>{c.inputs[0]}; }}};
//                                                     // and a backward (autograd/backward_registry.h)
//                                                     // or .not_differentiable = "why not"
//   static OpRegistrar neg_cpu{"neg", DeviceType::cpu, neg_cpu_kernel};     // devices/cpu/: a kernel
//
// Calling it:
//
//   std::vector<Tensor> out = call_op("neg", {x});
//
// The op, kernel and backward tables are filled by registrars in any order as the libraries load,
// so nothing checks them then; check_op_tables() does, once loaded (devices' registry test and
// `troupe op --check` call it).
#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "devices/attrs.h"
#include "devices/tensor.h"

namespace troupe {

struct AttrSpec {
  std::string name;
  AttrType type = AttrType::integer;
  std::optional<AttrValue> default_value;  // none: the attribute is required
  std::string doc;
};

// What inference sees: input metas and the call's attributes (defaults filled in, types checked).
struct OpInfer {
  std::string_view op;
  const std::vector<TensorMeta>& inputs;
  const Attrs& attrs;
};

// What a kernel sees: the inputs, the attributes, and the output metas inference produced.
struct OpCall {
  std::string_view op;
  const std::vector<Tensor>& inputs;
  const Attrs& attrs;
  const std::vector<TensorMeta>& outputs;
};

using InferFn = std::function<std::vector<TensorMeta>(const OpInfer&)>;
using KernelFn = std::function<std::vector<Tensor>(const OpCall&)>;

struct OpDef {
  std::string name;
  std::string doc;
  int min_inputs = 1;
  int max_inputs = 1;  // -1: any number
  std::vector<AttrSpec> attrs;
  // Validates inputs (throwing ShapeError/DTypeError/... naming the op) and returns output metas.
  InferFn infer;
  // Left to the device files' registrars; `{}` so a definition may leave it out unwarned.
  std::map<DeviceType, KernelFn> kernels{};
  // Inputs may live on different devices (the op moves them itself).
  bool mixed_devices = false;
  // Empty: the op is differentiable, and devices/autograd/ registers its backward under the same
  // name. Otherwise why gradients cannot flow through it ("comparison: bool output").
  std::string not_differentiable{};

  bool differentiable() const { return not_differentiable.empty(); }
};

// OpDef::not_differentiable of the ops that compute gradients (relu_backward, conv2d_backward_input, ...).
inline constexpr char kGradientKernel[] = "computes a gradient; gradients of gradients are not supported";

// Sees every op call while installed (the profiler); nullptr when none: one atomic load per call.
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  virtual void* begin(std::string_view op, const std::vector<Tensor>& inputs) = 0;
  virtual void end(void* token) = 0;
};

class OpRegistry {
 public:
  static OpRegistry& global();

  void define(OpDef def);  // ValueError when the name is taken
  // May precede define(). A kernel whose op is never defined, or a second one for the same op and
  // device (the first stays), is kept out of the table and reported by registration_problems().
  void add_kernel(std::string_view op, DeviceType device, KernelFn kernel);
  const OpDef& get(std::string_view op) const;  // ValueError naming close matches when unknown
  bool contains(std::string_view op) const;
  std::vector<std::string> names() const;

  // Defaults filled in; unknown names and wrong types rejected (ValueError naming the op).
  Attrs complete_attrs(const OpDef& def, const Attrs& attrs) const;
  // Arity, attributes and the op's own inference.
  std::vector<TensorMeta> infer(const OpDef& def, const std::vector<TensorMeta>& inputs, const Attrs& attrs) const;
  std::vector<TensorMeta> infer(std::string_view op, const std::vector<TensorMeta>& inputs,
                                const Attrs& attrs = {}) const;
  std::vector<Tensor> call(const OpDef& def, const std::vector<Tensor>& inputs, const Attrs& attrs = {}) const;
  std::vector<Tensor> call(std::string_view op, const std::vector<Tensor>& inputs, const Attrs& attrs = {}) const;

  void set_observer(OpObserver* observer) { observer_.store(observer, std::memory_order_release); }

  // Kernels for ops no define() named (so far) and kernels registered twice, one line each.
  std::vector<std::string> registration_problems() const;

 private:
  using Kernels = std::map<DeviceType, KernelFn>;

  mutable std::shared_mutex mutex_;
  std::map<std::string, OpDef, std::less<>> ops_;  // node-based: references stay valid
  std::map<std::string, Kernels, std::less<>> undefined_op_kernels_;  // waiting for define(), else orphans
  std::vector<std::string> duplicate_kernels_;
  std::atomic<OpObserver*> observer_{nullptr};
};

struct OpRegistrar {
  explicit OpRegistrar(OpDef def) { OpRegistry::global().define(std::move(def)); }
  OpRegistrar(std::string_view op, DeviceType device, KernelFn kernel) {
    OpRegistry::global().add_kernel(op, device, std::move(kernel));
  }
};

// Every disagreement between the op table, the per-device kernels and the backward functions, one
// line each; empty when they agree: kernels for undefined ops, duplicate kernels, backward
// functions for ops that do not exist, differentiable ops without a backward. Call it after the
// libraries have loaded, never from a registrar.
std::vector<std::string> check_op_tables(const OpRegistry& registry = OpRegistry::global());

inline std::vector<Tensor> call_op(std::string_view op, const std::vector<Tensor>& inputs, const Attrs& attrs = {}) {
  return OpRegistry::global().call(op, inputs, attrs);
}

}  // namespace troupe
