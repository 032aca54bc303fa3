#include "models/nn/bf16_copy.h"

#include "devices/autograd/grad_mode.h"

namespace troupe::models {

Tensor Bf16Copy::of(const Tensor& parameter) const {
  if (!parameter.defined() || !parameter.device().is_cuda() || parameter.dtype() == DType::bf16) return parameter;
  const std::shared_ptr<Storage>& storage = parameter.storage();
  std::lock_guard lock(mutex_);
  if (copy_.defined() && source_.lock() == storage && version_ == storage->version() &&
      copy_.shape() == parameter.shape() && copy_.device() == parameter.device())
    return copy_;
  NoGradGuard no_grad;  // a copy for inference: no tape for the conversion
  copy_ = parameter.detach().to(DType::bf16).contiguous();
  source_ = storage;
  version_ = storage->version();
  return copy_;
}

}  // namespace troupe::models
