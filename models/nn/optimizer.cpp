#include "models/nn/optimizer.h"

#include <algorithm>

#include "devices/autograd/grad_mode.h"
#include "devices/backend.h"
#include "devices/ops.h"
#include "devices/registry.h"

namespace troupe::models {

namespace {

void check_dtype(const char* who, const Tensor& p) {
  if (p.dtype() != DType::f32 && p.dtype() != DType::f64)
    throw DTypeError(std::string(who) + ": parameters must be f32 or f64, got " + p.meta().str());
}

// The step's new values into the parameter's own bytes, on its device: it stays the same tensor
// (its grad, its place on the tape, every module holding it), as when it was updated in place.
void assign(Tensor& p, const Tensor& value) {
  void* dst = p.mutable_raw_data();  // copy-on-write first, and a new version for the tape
  backend(p.device().type).copy(dst, p.device(), value.raw_data(), value.device(), p.nbytes());
}

}  // namespace

Optimizer::Optimizer(std::vector<Tensor*> params) : params_(std::move(params)) {
  for (Tensor* p : params_)
    if (!p || !p->defined()) throw ValueError("optimizer: a parameter is missing or undefined");
}

void Optimizer::zero_grad() {
  for (Tensor* p : params_)
    if (p->requires_grad()) p->set_grad(Tensor());
}

std::vector<Optimizer::Entry> Optimizer::checked_entries(const char* who, const std::map<std::string, Tensor>& state,
                                                         const std::vector<std::string>& slots,
                                                         const std::string& scalar_slot) const {
  std::vector<Entry> entries;
  for (const auto& [name, value] : state) {
    const auto dot = name.find('.');
    const std::string index_text = name.substr(0, dot);
    const std::string slot = dot == std::string::npos ? std::string() : name.substr(dot + 1);
    size_t index = params_.size();
    if (!index_text.empty() && index_text.size() < 10 &&
        index_text.find_first_not_of("0123456789") == std::string::npos)
      index = std::stoul(index_text);
    if (index >= params_.size() || std::find(slots.begin(), slots.end(), slot) == slots.end())
      throw ValueError(std::string(who) + ".load_state_dict: unexpected entry '" + name + "' for " +
                       std::to_string(params_.size()) + " parameters");
    const Tensor& p = *params_[index];
    if (slot == scalar_slot) {
      if (value.dtype() != DType::i64 || value.numel() != 1)
        throw DTypeError(std::string(who) + ".load_state_dict: " + name + " must be one i64, got " + value.meta().str());
    } else if (value.dtype() != p.dtype() || value.shape() != p.shape()) {
      throw ShapeError(std::string(who) + ".load_state_dict: " + name + " is " + value.meta().str() +
                       ", its parameter is " + p.meta().str());
    }
    entries.push_back({index, slot, value});
  }
  return entries;
}

SGD::SGD(std::vector<Tensor*> params, SGDOptions opts)
    : Optimizer(std::move(params)), options(opts), momentum_(params_.size()) {
  if (options.lr < 0 || options.momentum < 0 || options.weight_decay < 0)
    throw ValueError("SGD: lr, momentum and weight_decay must be >= 0");
  if (options.nesterov && (options.momentum <= 0 || options.dampening != 0))
    throw ValueError("SGD: nesterov needs a positive momentum and zero dampening");
}

// d = g + wd * p; buf = momentum * buf + (1 - dampening) * d (buf = d on the first step);
// d = nesterov ? d + momentum * buf : buf; p -= lr * d.
void SGD::step() {
  NoGradGuard no_grad;
  const Attrs attrs{{"lr", options.lr},
                    {"momentum", options.momentum},
                    {"dampening", options.dampening},
                    {"weight_decay", options.weight_decay},
                    {"nesterov", options.nesterov}};
  for (size_t k = 0; k < params_.size(); ++k) {
    Tensor& p = *params_[k];
    const Tensor grad = p.grad();
    if (!grad.defined()) continue;
    check_dtype("SGD", p);
    // One fused kernel (devices/cpu/sgd_update.cpp). The inputs are temporaries: no handle on p's
    // bytes outlives the call, so assign() writes them without copying them first.
    const std::vector<Tensor> out = options.momentum != 0 && momentum_[k].defined()
                                        ? call_op("sgd_update", {p, grad, momentum_[k]}, attrs)
                                        : call_op("sgd_update", {p, grad}, attrs);
    assign(p, out[0]);
    if (options.momentum != 0) momentum_[k] = out[1];
  }
}

std::map<std::string, Tensor> SGD::state_dict() const {
  std::map<std::string, Tensor> out;
  for (size_t k = 0; k < momentum_.size(); ++k)
    if (momentum_[k].defined()) out.emplace(std::to_string(k) + ".momentum_buffer", momentum_[k].clone());
  return out;
}

void SGD::load_state_dict(const std::map<std::string, Tensor>& state) {
  const auto entries = checked_entries("SGD", state, {"momentum_buffer"});
  std::vector<Tensor> momentum(params_.size());
  for (const Entry& e : entries) momentum[e.index] = e.value.contiguous().clone();
  momentum_ = std::move(momentum);
}

Adam::Adam(std::vector<Tensor*> params, AdamOptions opts)
    : Optimizer(std::move(params)), options(opts), state_(params_.size()) {
  if (options.lr < 0 || options.eps < 0 || options.weight_decay < 0)
    throw ValueError("Adam: lr, eps and weight_decay must be >= 0");
  if (!(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1))
    throw ValueError("Adam: betas must be in [0, 1), got " + std::to_string(options.beta1) + ", " +
                     std::to_string(options.beta2));
}

// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2 (g with weight decay added);
// p -= lr / (1 - b1^t) * m / (sqrt(v or max v so far) / sqrt(1 - b2^t) + eps).
void Adam::step() {
  NoGradGuard no_grad;
  for (size_t k = 0; k < params_.size(); ++k) {
    Tensor& p = *params_[k];
    const Tensor grad = p.grad();
    if (!grad.defined()) continue;
    check_dtype("Adam", p);
    State& s = state_[k];
    if (s.steps++ == 0) {
      s.m = Tensor::zeros(p.shape(), p.dtype(), p.device());
      s.v = Tensor::zeros(p.shape(), p.dtype(), p.device());
      if (options.amsgrad) s.v_max = Tensor::zeros(p.shape(), p.dtype(), p.device());
    }
    const Attrs attrs{{"lr", options.lr},   {"beta1", options.beta1},
                      {"beta2", options.beta2}, {"eps", options.eps},
                      {"weight_decay", options.weight_decay}, {"step", s.steps}};
    // One fused kernel (devices/cpu/adam_update.cpp), its inputs temporaries as in SGD::step.
    const std::vector<Tensor> out = options.amsgrad ? call_op("adam_update", {p, grad, s.m, s.v, s.v_max}, attrs)
                                                    : call_op("adam_update", {p, grad, s.m, s.v}, attrs);
    assign(p, out[0]);
    s.m = out[1];
    s.v = out[2];
    if (options.amsgrad) s.v_max = out[3];
  }
}

std::map<std::string, Tensor> Adam::state_dict() const {
  std::map<std::string, Tensor> out;
  for (size_t k = 0; k < state_.size(); ++k) {
    const State& s = state_[k];
    if (s.steps == 0) continue;
    const std::string i = std::to_string(k) + ".";
    out.emplace(i + "step", Tensor::scalar<int64_t>(s.steps));
    out.emplace(i + "exp_avg", s.m.clone());
    out.emplace(i + "exp_avg_sq", s.v.clone());
    if (s.v_max.defined()) out.emplace(i + "max_exp_avg_sq", s.v_max.clone());
  }
  return out;
}

void Adam::load_state_dict(const std::map<std::string, Tensor>& state) {
  const auto entries = checked_entries("Adam", state, {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}, "step");
  std::vector<State> loaded(params_.size());
  for (const Entry& e : entries) {
    State& s = loaded[e.index];
    if (e.slot == "step") s.steps = e.value.item<int64_t>();
    else (e.slot == "exp_avg" ? s.m : e.slot == "exp_avg_sq" ? s.v : s.v_max) = e.value.contiguous().clone();
  }
  for (size_t k = 0; k < loaded.size(); ++k) {
    const State& s = loaded[k];
    const bool complete = s.steps > 0 && s.m.defined() && s.v.defined() && s.v_max.defined() == options.amsgrad;
    const bool empty = s.steps == 0 && !s.m.defined() && !s.v.defined() && !s.v_max.defined();
    if (!complete && !empty)
      throw ValueError("Adam.load_state_dict: parameter " + std::to_string(k) +
                       "'s state is incomplete (step >= 1, exp_avg, exp_avg_sq" +
                       (options.amsgrad ? ", max_exp_avg_sq" : "") + " go together)");
  }
  state_ = std::move(loaded);
}

Tensor flatten_grads(const std::vector<Tensor*>& params) {
  if (params.empty()) throw ValueError("flatten_grads: no parameters");
  const DType dtype = params[0]->dtype();
  int64_t total = 0;
  for (Tensor* p : params) {
    if (p->dtype() != dtype)
      throw DTypeError("flatten_grads: parameters of mixed dtypes (" + params[0]->meta().str() + ", " +
                       p->meta().str() + ")");
    total += p->numel();
  }
  const Device device = params[0]->device();
  if (!device.is_cpu()) {  // one cat on the device: its gradients never pass through the host here
    NoGradGuard no_grad;
    std::vector<Tensor> pieces;
    for (Tensor* p : params) {
      const Tensor g = p->grad();
      pieces.push_back(g.defined() ? g.detach().to(dtype).reshape({p->numel()}) : Tensor::zeros({p->numel()}, dtype, device));
    }
    return cat(pieces, 0);
  }
  Tensor flat = Tensor::zeros({total}, dtype);
  char* out = static_cast<char*>(flat.mutable_raw_data());
  for (Tensor* p : params) {
    const Tensor g = p->grad();
    if (g.defined()) copy_elements(g, dtype, out);
    out += p->nbytes();
  }
  return flat;
}

void assign_flat_grads(const std::vector<Tensor*>& params, const Tensor& flat) {
  int64_t total = 0;
  for (Tensor* p : params) total += p->numel();
  if (flat.dim() != 1 || flat.numel() != total)
    throw ShapeError("assign_flat_grads: expected [" + std::to_string(total) + "] for the parameters, got " +
                     flat.meta().str());
  const Tensor values = flat.detach();
  int64_t at = 0;
  for (Tensor* p : params) {
    Tensor piece = values.slice(0, at, at + p->numel()).to(p->dtype()).view(p->shape());
    p->set_grad(piece);  // a view of flat: no copy; copy-on-write keeps it apart from later writes
    at += p->numel();
  }
}

}  // namespace troupe::models
