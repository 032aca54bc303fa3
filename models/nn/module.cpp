#include "models/nn/module.h"

#include <cstring>

#include "devices/io/safetensors.h"

namespace troupe::models {

std::vector<std::pair<std::string, Tensor*>> Module::named_parameters(const std::string& prefix) {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (auto& [name, p] : parameters_) out.emplace_back(prefix + name, p);
  for (auto& [name, child] : children_) {
    auto inner = child->named_parameters(prefix + name + ".");
    out.insert(out.end(), inner.begin(), inner.end());
  }
  return out;
}

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

std::map<std::string, Tensor> Module::state_dict() {
  std::map<std::string, Tensor> out;
  for (auto& [name, p] : named_parameters()) out.emplace(name, p->detach());
  return out;
}

void Module::load(const std::map<std::string, Tensor>& state) {
  auto params = named_parameters();
  std::string missing, unexpected;
  for (auto& [name, p] : params)
    if (!state.count(name)) missing += (missing.empty() ? "" : ", ") + name;
  for (auto& [name, t] : state) {
    bool known = false;
    for (auto& [pname, p] : params) known = known || pname == name;
    if (!known) unexpected += (unexpected.empty() ? "" : ", ") + name;
  }
  if (!missing.empty() || !unexpected.empty())
    throw ValueError("load: the state does not match the module" +
                     (missing.empty() ? std::string() : "; missing: " + missing) +
                     (unexpected.empty() ? std::string() : "; unexpected: " + unexpected));
  for (auto& [name, p] : params) {
    const Tensor& value = state.at(name);
    if (value.shape() != p->shape())
      throw ShapeError("load: " + name + " is " + value.meta().str() + " in the state, " + p->meta().str() +
                       " in the module");
    const Tensor converted = value.detach().to(p->dtype()).contiguous();
    std::memcpy(p->mutable_raw_data(), converted.raw_data(), converted.nbytes());
  }
}

void Module::save(const std::string& path) { write_safetensors(path, state_dict(), {{"format", "pt"}}); }

void Module::load(const std::string& path) { load(read_safetensors(path)); }

void Module::register_parameter(std::string name, Tensor& parameter) {
  parameter.set_requires_grad(true);
  parameters_.emplace_back(std::move(name), &parameter);
}

void Module::register_module(std::string name, Module& child) { children_.emplace_back(std::move(name), &child); }

}  // namespace troupe::models
