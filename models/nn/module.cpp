#include "models/nn/module.h"

#include <set>

#include "devices/backend.h"
#include "devices/io/safetensors.h"

namespace troupe::models {

namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// value's elements into target's own bytes, wherever target lives: the tensor object stays (an
// optimizer's pointer to it, its grad, its place as a leaf), only its values change.
void copy_into(Tensor& target, const Tensor& value) {
  const Tensor source = value.detach().to(target.dtype()).to(target.device()).contiguous();
  void* bytes = target.mutable_raw_data();
  backend(target.device().type).copy(bytes, target.device(), source.raw_data(), source.device(), source.nbytes());
}

// t on device as a new tensor with t's requires_grad and grad; DeviceError naming the tensor.
Tensor moved_to(const Tensor& t, Device device, const std::string& name) {
  try {
    Tensor out = t.detach().to(device);
    if (t.requires_grad()) {
      out.set_requires_grad(true);
      if (t.grad().defined()) out.set_grad(t.grad().to(device));
    }
    return out;
  } catch (const DeviceError& e) {
    throw DeviceError("Module::to(" + device.str() + "): cannot move " + name + " " + t.meta().str() + ": " + e.what());
  }
}

}  // namespace

Module::NamedTensors Module::named_tensors(const std::string& prefix, NamedTensors Module::*own) {
  NamedTensors out;
  for (auto& [name, t] : this->*own) out.emplace_back(prefix + name, t);
  for (auto& [name, child] : children_) {
    auto inner = child->named_tensors(prefix + name + ".", own);
    out.insert(out.end(), inner.begin(), inner.end());
  }
  return out;
}

Module::NamedTensors Module::named_parameters(const std::string& prefix) {
  return named_tensors(prefix, &Module::parameters_);
}

Module::NamedTensors Module::named_buffers(const std::string& prefix) { return named_tensors(prefix, &Module::buffers_); }

std::vector<Tensor*> Module::parameters() {
  std::vector<Tensor*> out;
  for (auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

int64_t Module::parameter_count() {
  int64_t n = 0;
  for (Tensor* p : parameters()) n += p->numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (Tensor* p : parameters()) p->set_grad(Tensor());
}

void Module::to(Device device) {
  NamedTensors all = named_parameters();
  for (auto& entry : named_buffers()) all.push_back(entry);
  std::vector<std::pair<Tensor*, Tensor>> moves;  // all made before any is applied: nothing moves on an error
  for (auto& [name, t] : all)
    if (t->device() != device) moves.emplace_back(t, moved_to(*t, device, name));
  for (auto& [t, moved] : moves) *t = std::move(moved);
}

std::map<std::string, Tensor> Module::state_dict() {
  std::map<std::string, Tensor> out;
  for (auto& [name, p] : named_parameters()) out.emplace(name, p->detach());
  for (auto& [name, b] : named_buffers()) out.emplace(name, b->detach());
  return out;
}

void Module::load(const std::map<std::string, Tensor>& state) {
  NamedTensors all = named_parameters();
  for (auto& entry : named_buffers()) all.push_back(entry);
  std::set<std::string> known;
  std::vector<std::string> missing, unexpected;
  for (auto& [name, t] : all) {
    known.insert(name);
    if (!state.count(name)) missing.push_back(name);
  }
  for (auto& [name, value] : state)
    if (!known.count(name)) unexpected.push_back(name);
  if (!missing.empty() || !unexpected.empty())
    throw ValueError("load: the state does not match the module" +
                     (missing.empty() ? std::string() : "; missing: " + joined(missing)) +
                     (unexpected.empty() ? std::string() : "; unexpected: " + joined(unexpected)));
  for (auto& [name, t] : all) {
    const Tensor& value = state.at(name);
    if (value.shape() != t->shape())
      throw ShapeError("load: " + name + " is " + value.meta().str() + " in the state, " + t->meta().str() +
                       " in the module");
  }
  for (auto& [name, t] : all) copy_into(*t, state.at(name));
}

void Module::save(const std::string& path) { write_safetensors(path, state_dict(), {{"format", "pt"}}); }

void Module::load(const std::string& path) { load(read_safetensors(path)); }

void Module::register_parameter(std::string name, Tensor& parameter) {
  parameter.set_requires_grad(true);
  parameters_.emplace_back(std::move(name), &parameter);
}

void Module::register_buffer(std::string name, Tensor& buffer) { buffers_.emplace_back(std::move(name), &buffer); }

void Module::register_module(std::string name, Module& child) { children_.emplace_back(std::move(name), &child); }

std::map<std::string, Tensor> sub_state(const std::map<std::string, Tensor>& state, const std::string& prefix) {
  std::map<std::string, Tensor> out;
  for (auto it = state.lower_bound(prefix); it != state.end() && it->first.rfind(prefix, 0) == 0; ++it)
    out.emplace(it->first.substr(prefix.size()), it->second);
  return out;
}

}  // namespace troupe::models
