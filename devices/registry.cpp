#include "devices/registry.h"

#include "devices/lane.h"
#include "devices/sync.h"

#include <algorithm>
#include <mutex>

#include "devices/autograd/backward_registry.h"
#include "devices/autograd/grad_mode.h"
#include "devices/autograd/tape.h"
#include "devices/sync.h"

namespace troupe {

OpRegistry& OpRegistry::global() {
  static OpRegistry* registry = new OpRegistry;  // never destroyed: ops may run during static teardown
  return *registry;
}

namespace {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

// " (did you mean add, and?)" naming the defined ops within two edits of op, or "" when none are.
template <class Ops>
std::string did_you_mean(const Ops& ops, std::string_view op) {
  std::string close;
  for (auto& [name, def] : ops)
    if (edit_distance(name, op) <= 2) close += (close.empty() ? "" : ", ") + name;
  return close.empty() ? "" : " (did you mean " + close + "?)";
}

std::string duplicate_kernel(std::string_view op, DeviceType device) {
  return "op '" + std::string(op) + "': a second " + name(device) + " kernel (the first one stays)";
}

}  // namespace

void OpRegistry::define(OpDef def) {
  if (!def.infer) throw ValueError("define: op '" + def.name + "' has no inference function");
  std::unique_lock lock(mutex_);
  if (ops_.contains(def.name)) throw ValueError("define: op '" + def.name + "' is already registered");
  if (auto waiting = undefined_op_kernels_.extract(def.name)) {  // kernels registered before the definition
    for (auto& [device, kernel] : waiting.mapped())
      if (!def.kernels.emplace(device, std::move(kernel)).second)
        duplicate_kernels_.push_back(duplicate_kernel(def.name, device));
  }
  std::string key = def.name;
  ops_.emplace(std::move(key), std::move(def));
}

void OpRegistry::add_kernel(std::string_view op, DeviceType device, KernelFn kernel) {
  std::unique_lock lock(mutex_);
  auto it = ops_.find(op);
  Kernels& kernels = it != ops_.end() ? it->second.kernels : undefined_op_kernels_[std::string(op)];
  if (!kernels.emplace(device, std::move(kernel)).second) duplicate_kernels_.push_back(duplicate_kernel(op, device));
}

std::vector<std::string> OpRegistry::registration_problems() const {
  std::shared_lock lock(mutex_);
  std::vector<std::string> problems;
  for (auto& [op, kernels] : undefined_op_kernels_)
    for (auto& [device, kernel] : kernels)
      problems.push_back("op '" + op + "': a " + name(device) + " kernel, but no op of that name is defined" +
                         did_you_mean(ops_, op));
  problems.insert(problems.end(), duplicate_kernels_.begin(), duplicate_kernels_.end());
  return problems;
}

const OpDef& OpRegistry::get(std::string_view op) const {
  std::shared_lock lock(mutex_);
  auto it = ops_.find(op);
  if (it != ops_.end()) return it->second;
  const std::string close = did_you_mean(ops_, op);
  throw ValueError("unknown op '" + std::string(op) + "'" +
                   (close.empty() ? std::string(" (`troupe op --list` lists them)") : close));
}

bool OpRegistry::contains(std::string_view op) const {
  std::shared_lock lock(mutex_);
  return ops_.contains(op);
}

std::vector<std::string> OpRegistry::names() const {
  std::shared_lock lock(mutex_);
  std::vector<std::string> out;
  for (auto& [name, def] : ops_) out.push_back(name);
  return out;
}

Attrs OpRegistry::complete_attrs(const OpDef& def, const Attrs& attrs) const {
  for (auto& [key, value] : attrs.items()) {
    auto spec = std::find_if(def.attrs.begin(), def.attrs.end(), [&](const AttrSpec& s) { return s.name == key; });
    if (spec == def.attrs.end()) {
      std::string known;
      for (auto& s : def.attrs) known += (known.empty() ? "" : ", ") + s.name;
      throw ValueError(def.name + ": unknown attribute '" + key + "' (" +
                       (known.empty() ? "it takes none" : "it takes " + known) + ")");
    }
    // An integer where a float is expected is fine; anything else must match.
    if (type_of(value) != spec->type && !(spec->type == AttrType::real && type_of(value) == AttrType::integer))
      throw ValueError(def.name + ": attribute " + key + " expects " + name(spec->type) + ", got " +
                       name(type_of(value)) + " " + to_string(value));
  }
  Attrs full;
  for (auto& spec : def.attrs) {
    if (const AttrValue* v = attrs.find(spec.name)) {
      if (spec.type == AttrType::real && type_of(*v) == AttrType::integer)
        full.set(spec.name, static_cast<double>(std::get<int64_t>(*v)));
      else
        full.set(spec.name, *v);
    } else if (spec.default_value) {
      full.set(spec.name, *spec.default_value);
    } else {
      throw ValueError(def.name + ": missing required attribute '" + spec.name + "' (" + name(spec.type) + ")");
    }
  }
  return full;
}

namespace {

void check_arity(const OpDef& def, size_t n) {
  const bool few = static_cast<int>(n) < def.min_inputs;
  const bool many = def.max_inputs >= 0 && static_cast<int>(n) > def.max_inputs;
  if (!few && !many) return;
  std::string expected = def.min_inputs == def.max_inputs ? std::to_string(def.min_inputs)
                         : def.max_inputs < 0             ? "at least " + std::to_string(def.min_inputs)
                                              : std::to_string(def.min_inputs) + " to " + std::to_string(def.max_inputs);
  throw ValueError(def.name + ": expects " + expected + " input(s), got " + std::to_string(n));
}

}  // namespace

std::vector<TensorMeta> OpRegistry::infer(const OpDef& def, const std::vector<TensorMeta>& inputs,
                                          const Attrs& attrs) const {
  check_arity(def, inputs.size());
  const Attrs full = complete_attrs(def, attrs);
  return def.infer(OpInfer{def.name, inputs, full});
}

std::vector<TensorMeta> OpRegistry::infer(std::string_view op, const std::vector<TensorMeta>& inputs,
                                          const Attrs& attrs) const {
  return infer(get(op), inputs, attrs);
}

std::vector<Tensor> OpRegistry::call(const OpDef& def, const std::vector<Tensor>& inputs, const Attrs& attrs) const {
  check_arity(def, inputs.size());
  const Attrs full = complete_attrs(def, attrs);
  std::vector<TensorMeta> metas;
  metas.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined())
      throw ValueError(def.name + ": input " + std::to_string(i) + " is an undefined tensor");
    metas.push_back(inputs[i].meta());
  }
  const Device device = inputs.empty() ? Device::cpu() : inputs[0].device();
  if (!def.mixed_devices)
    for (size_t i = 1; i < inputs.size(); ++i)
      if (!(inputs[i].device() == device))
        throw DeviceError(def.name + ": inputs on different devices: input 0 is on " + device.str() + ", input " +
                          std::to_string(i) + " on " + inputs[i].device().str());
  std::vector<TensorMeta> outputs = def.infer(OpInfer{def.name, metas, full});
  auto kernel = def.kernels.find(device.type);
  if (kernel == def.kernels.end())
    throw DeviceError(def.name + ": no " + name(device.type) + " kernel (inputs are on " + device.str() + ")");
  if (device.is_cuda())  // the kernel's stream reads what lanes wrote only after they wrote it
    for (const Tensor& t : inputs) await_ready(t);
  auto run = [&] {
    SyncAttribution::OpScope attributed(def.name);  // a sync inside the kernel names this op
    OpObserver* observer = observer_.load(std::memory_order_acquire);
    if (!observer) return kernel->second(OpCall{def.name, inputs, full, outputs});
    void* token = observer->begin(def.name, inputs);
    try {
      auto result = kernel->second(OpCall{def.name, inputs, full, outputs});
      observer->end(token);
      return result;
    } catch (...) {
      observer->end(token);
      throw;
    }
  };
  // The tape costs inference one thread-local check (and a scan of the inputs when grad mode is on).
  if (grad_enabled() && any_requires_grad(inputs)) return record_call(def.name, inputs, full, run);
  std::vector<Tensor> result = run();
  drop_autograd(result);
  return result;
}

std::vector<Tensor> OpRegistry::call(std::string_view op, const std::vector<Tensor>& inputs,
                                     const Attrs& attrs) const {
  return call(get(op), inputs, attrs);
}

std::vector<std::string> check_op_tables(const OpRegistry& registry) {
  std::vector<std::string> problems = registry.registration_problems();
  for (const std::string& op : registry.names()) {
    const OpDef& def = registry.get(op);
    const bool has_backward = find_backward(op) != nullptr;
    if (def.differentiable() && !has_backward)
      problems.push_back("op '" + op + "': differentiable, but no backward is registered (register one in "
                         "devices/autograd/, or set OpDef::not_differentiable to the reason)");
    if (!def.differentiable() && has_backward)
      problems.push_back("op '" + op + "': a backward is registered, but the op says it is not differentiable (" +
                         def.not_differentiable + ")");
  }
  for (const BackwardDef& def : backward_defs())
    if (!registry.contains(def.op) && !def.tensor_method)
      problems.push_back("backward for '" + def.op + "': no op of that name is defined");
  return problems;
}

}  // namespace troupe
