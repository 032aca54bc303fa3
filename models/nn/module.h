#pragma once
// Module: the base of trainable layers, PyTorch's nn.Module in small. A subclass keeps its
// parameters and sub-modules as members and registers them by name in its constructor; names
// join with dots like PyTorch's (conv1.weight, fc2.bias), so state dicts move between the two.
//
//   class Affine : public Module {
//    public:
//     Affine() { register_parameter("weight", weight); register_module("inner", inner); }
//     Tensor weight = rand_uniform({4, 4}, -0.5, 0.5);
//     Linear inner{4, 2};
//   };
//   Affine m;
//   for (auto& [name, p] : m.named_parameters()) std::cout << name << " " << p->meta().str() << "\n";
//   m.save("affine.safetensors");   // later: m.load("affine.safetensors")
//
// Modules are neither copied nor moved: the registry holds pointers to the members. Optimizers
// hold them too (parameters() returns pointers), so an update writes the module's own tensors.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "devices/tensor.h"

namespace troupe::models {

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Depth-first, in registration order: own parameters, then each sub-module's.
  std::vector<std::pair<std::string, Tensor*>> named_parameters(const std::string& prefix = "");
  std::vector<Tensor*> parameters();
  int64_t parameter_count();  // elements, summed

  void train(bool on = true);  // this module and every sub-module
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();  // every parameter's grad to none

  // Detached handles to the parameters by name (copy-on-write: later updates don't show in them).
  std::map<std::string, Tensor> state_dict();
  // Copies every parameter's values in from state (converted to the parameter's dtype). ValueError
  // naming the missing and unexpected names; ShapeError for a shape that differs.
  void load(const std::map<std::string, Tensor>& state);
  void save(const std::string& path);        // safetensors
  void load(const std::string& path);

 protected:
  // The tensor becomes a leaf that requires grad; it must outlive the module's use (a member).
  void register_parameter(std::string name, Tensor& parameter);
  void register_module(std::string name, Module& child);

 private:
  std::vector<std::pair<std::string, Tensor*>> parameters_;
  std::vector<std::pair<std::string, Module*>> children_;
  bool training_ = true;
};

}  // namespace troupe::models
