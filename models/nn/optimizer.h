#pragma once
// Optimizers with PyTorch's update rules (torch.optim.SGD and torch.optim.Adam). They hold
// pointers to the parameters (Module::parameters()) and update them in place under NoGradGuard;
// parameters whose grad is undefined are skipped, as in PyTorch.
//
//   SGD sgd(net.parameters(), {.lr = 0.01, .momentum = 0.5});
//   Adam adam(net.parameters(), {.lr = 1e-3, .weight_decay = 1e-4});
//   loss.backward();
//   sgd.step();
//   sgd.zero_grad();
//
// state_dict() names the optimizer's per-parameter state by the parameter's index, as PyTorch's
// does ("3.momentum_buffer", "3.exp_avg", "3.step"); load_state_dict() checks every name, shape and
// dtype against the parameters before it changes anything (checkpoints: models/train/checkpoint.h).
//
// For data-parallel training, flatten_grads() packs every gradient into one tensor for a single
// all_reduce and assign_flat_grads() unpacks the reduced result.
// On a device both stay there (flat is on the parameters' device).
#include <map>
#include <string>
#include <vector>

#include "devices/tensor.h"

namespace troupe::models {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor*> params);
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  void zero_grad();  // every parameter's grad to none
  const std::vector<Tensor*>& params() const { return params_; }

  virtual std::map<std::string, Tensor> state_dict() const = 0;
  // ValueError, ShapeError or DTypeError naming the entry when the state does not fit these
  // parameters (unknown names, another model's shapes); nothing is changed then.
  virtual void load_state_dict(const std::map<std::string, Tensor>& state) = 0;

 protected:
  // The parameter index and slot of a state entry "<index>.<slot>", checked against the parameters
  // (index in range; dtype and, unless scalar, shape of that parameter; slot among `slots`).
  struct Entry {
    size_t index;
    std::string slot;
    const Tensor& value;
  };
  std::vector<Entry> checked_entries(const char* who, const std::map<std::string, Tensor>& state,
                                     const std::vector<std::string>& slots, const std::string& scalar_slot = {}) const;

  std::vector<Tensor*> params_;
};

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor*> params, SGDOptions options);
  void step() override;
  std::map<std::string, Tensor> state_dict() const override;  // "<i>.momentum_buffer"
  void load_state_dict(const std::map<std::string, Tensor>& state) override;
  SGDOptions options;

 private:
  std::vector<Tensor> momentum_;  // per parameter; undefined until its first step
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // L2, added to the gradient (torch.optim.Adam, not AdamW)
  bool amsgrad = false;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor*> params, AdamOptions options);
  void step() override;
  std::map<std::string, Tensor> state_dict() const override;  // "<i>.step" (i64), exp_avg, exp_avg_sq, max_exp_avg_sq
  void load_state_dict(const std::map<std::string, Tensor>& state) override;
  AdamOptions options;

 private:
  struct State {
    int64_t steps = 0;
    Tensor m, v, v_max;
  };
  std::vector<State> state_;
};

// Every parameter's gradient, flattened and concatenated in order (zeros where a parameter has
// none), in the parameters' common dtype; and the inverse, which sets each parameter's grad.
Tensor flatten_grads(const std::vector<Tensor*>& params);
void assign_flat_grads(const std::vector<Tensor*>& params, const Tensor& flat);

}  // namespace troupe::models
