#pragma once
// Module: the one base of models and layers, PyTorch's nn.Module in small. A subclass keeps its
// parameters, buffers and sub-modules as members and registers them by name in its constructor;
// names join with dots like PyTorch's (conv1.weight, cell_f.weight_ih_l0), so state dicts move
// between the two.
//
//   class Scaled : public Module {
//    public:
//     Scaled() {
//       register_parameter("scale", scale);  // trained: requires grad, in parameters()
//       register_buffer("shift", shift);     // state, not trained: in state_dict() only
//       register_module("inner", inner);     // inner.weight, inner.bias
//     }
//     Tensor forward(const Tensor& x) const { return inner(add(mul(x, scale), shift)); }
//     Tensor scale = rand_uniform({4}, -1, 1), shift = Tensor::zeros({4});
//     Linear inner{4, 2};
//   };
//   Scaled m;
//   for (auto& [name, p] : m.named_parameters()) std::cout << name << " " << p->meta().str() << "\n";
//   m.eval();                      // m and every sub-module: dropout off
//   m.to(Device::cuda());          // parameters and buffers move in place; DeviceError without a GPU
//   m.save("scaled.safetensors");  // later: m.load("scaled.safetensors")
//   m.inner.load(sub_state(checkpoint, "inner."));   // one sub-module's part of a checkpoint
//
// Initial weights come from troupe's Generator (devices/random.h): the calling thread's
// (manual_seed), or, when a constructor takes a seed, a local Generator(seed) that it hands to its
// layers (Linear(in, out, bias, dtype, generator)); no constructor reseeds the thread's.
//
// Modules are neither copied nor moved: the registry holds pointers to the members. Optimizers
// hold them too (parameters() returns pointers), so an update writes the module's own tensors;
// make the optimizer after to(), since its state stays where the parameters were.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "devices/tensor.h"

namespace troupe::models {

class Module {
 public:
  using NamedTensors = std::vector<std::pair<std::string, Tensor*>>;

  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Depth-first, in registration order: own tensors, then each sub-module's.
  NamedTensors named_parameters(const std::string& prefix = "");
  NamedTensors named_buffers(const std::string& prefix = "");
  std::vector<Tensor*> parameters();
  int64_t parameter_count();  // elements, summed

  void train(bool on = true);  // this module and every sub-module
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();  // every parameter's grad to none

  // Moves every parameter and buffer to device, in place (requires_grad and grads go along).
  // Nothing moves when one cannot: DeviceError naming the tensor and why (no GPU, no such device).
  void to(Device device);

  // Detached handles to the parameters and buffers by name (copy-on-write: later updates don't
  // show in them).
  std::map<std::string, Tensor> state_dict();
  // Copies every parameter's and buffer's values in from state (converted to its dtype and
  // device). ValueError naming the missing and unexpected names; ShapeError for a shape that
  // differs. A model whose checkpoints use other names overrides it (XLMR) and calls this one.
  virtual void load(const std::map<std::string, Tensor>& state);
  void save(const std::string& path);  // safetensors
  void load(const std::string& path);

 protected:
  // The tensor becomes a leaf that requires grad; it must outlive the module's use (a member).
  void register_parameter(std::string name, Tensor& parameter);
  // State that is saved and loaded and moves with to(), but is not trained (no grad).
  void register_buffer(std::string name, Tensor& buffer);
  void register_module(std::string name, Module& child);

 private:
  NamedTensors named_tensors(const std::string& prefix, NamedTensors Module::*own);

  NamedTensors parameters_, buffers_;
  std::vector<std::pair<std::string, Module*>> children_;
  bool training_ = true;
};

// The entries of state whose names start with prefix, the prefix removed: a sub-module's part of
// a larger checkpoint ("cell_f." of a BidirectionalLSTM's state for one LSTM).
std::map<std::string, Tensor> sub_state(const std::map<std::string, Tensor>& state, const std::string& prefix);

}  // namespace troupe::models
