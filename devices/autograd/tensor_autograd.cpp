// The Tensor methods that read and set autograd state (devices/autograd/autograd.h has the rules).
#include "devices/autograd/node.h"

namespace troupe {

Tensor& Tensor::set_requires_grad(bool enabled) {
  if (!defined()) throw ValueError("set_requires_grad: the tensor is undefined");
  if (enabled) {
    if (!is_floating(dtype_))
      throw DTypeError("set_requires_grad: only floating tensors can require grad, got " + meta().str());
    if (!autograd_) {
      autograd_ = std::make_shared<AutogradMeta>();
      autograd_->requires_grad = true;
    }
    return *this;
  }
  if (autograd_ && autograd_->grad_fn)
    throw ValueError("set_requires_grad: " + meta().str() + " is the output of '" +
                     std::string(autograd_->grad_fn->op) + "', not a leaf; use detach() instead");
  autograd_.reset();
  return *this;
}

bool Tensor::is_leaf() const { return !autograd_ || !autograd_->grad_fn; }

Tensor Tensor::grad() const { return autograd_ ? autograd_->grad : Tensor(); }

void Tensor::set_grad(const Tensor& grad) {
  if (!autograd_)
    throw ValueError("set_grad: " + meta().str() + " does not require grad");
  if (grad.defined() && (grad.dtype() != dtype_ || grad.shape() != shape_))
    throw ShapeError("set_grad: the gradient " + grad.meta().str() + " does not match the tensor " + meta().str());
  autograd_->grad = grad.detach();
}

Tensor Tensor::detach() const {
  Tensor t = *this;
  t.autograd_.reset();
  return t;
}

uint64_t Tensor::version() const { return autograd_ ? autograd_->version : 0; }

}  // namespace troupe
