#include "devices/registry.h"

#include <algorithm>
#include <mutex>

#include "devices/autograd/grad_mode.h"
#include "devices/autograd/tape.h"

namespace troupe {

OpRegistry& OpRegistry::global() {
  static OpRegistry* registry = new OpRegistry;  // never destroyed: ops may run during static teardown
  return *registry;
}

void OpRegistry::define(OpDef def) {
  if (!def.infer) throw ValueError("define: op '" + def.name + "' has no inference function");
  std::unique_lock lock(mutex_);
  auto it = ops_.find(def.name);
  if (it != ops_.end()) {
    if (it->second.infer) throw ValueError("define: op '" + def.name + "' is already registered");
    def.kernels.merge(it->second.kernels);  // kernels registered before the definition
    it->second = std::move(def);
    return;
  }
  std::string key = def.name;
  ops_.emplace(std::move(key), std::move(def));
}

void OpRegistry::add_kernel(std::string_view op, DeviceType device, KernelFn kernel) {
  std::unique_lock lock(mutex_);
  auto it = ops_.find(op);
  if (it == ops_.end()) {
    OpDef placeholder;
    placeholder.name = std::string(op);
    it = ops_.emplace(std::string(op), std::move(placeholder)).first;
  }
  it->second.kernels[device] = std::move(kernel);
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

}  // namespace

const OpDef& OpRegistry::get(std::string_view op) const {
  std::shared_lock lock(mutex_);
  auto it = ops_.find(op);
  if (it != ops_.end() && it->second.infer) return it->second;
  std::string close;
  for (auto& [name, def] : ops_)
    if (def.infer && edit_distance(name, op) <= 2) close += (close.empty() ? "" : ", ") + name;
  throw ValueError("unknown op '" + std::string(op) + "'" +
                   (close.empty() ? std::string(" (`troupe op --list` lists them)") : " (did you mean " + close + "?)"));
}

bool OpRegistry::contains(std::string_view op) const {
  std::shared_lock lock(mutex_);
  auto it = ops_.find(op);
  return it != ops_.end() && it->second.infer;
}

std::vector<std::string> OpRegistry::names() const {
  std::shared_lock lock(mutex_);
  std::vector<std::string> out;
  for (auto& [name, def] : ops_)
    if (def.infer) out.push_back(name);
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
  auto run = [&] {
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

}  // namespace troupe
