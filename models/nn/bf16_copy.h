#pragma once
// A parameter's bf16 copy for a GPU inference fastpath, made once and made again only when the
// parameter's bytes change (load() or to() gives it new storage; an optimizer step bumps the
// storage's version). The CPU's bf16 GEMM keeps a packed bf16 copy of its own (devices/cpu/
// gemm_bf16.h), so on the host the parameter itself is handed back.
//
//   Bf16Copy in_proj_bf16;                                   // a member next to the parameter
//   linear_bf16(x, in_proj_bf16.of(in_proj_weight), ...);    // converted on the first call only
//
// Safe to call from several threads at once (the module's forward is const and may be shared).
#include <cstdint>
#include <memory>
#include <mutex>

#include "devices/tensor.h"

namespace troupe::models {

class Bf16Copy {
 public:
  // parameter on the host: itself; on a GPU: its bf16 copy (parameter itself when it is bf16).
  Tensor of(const Tensor& parameter) const;

 private:
  mutable std::mutex mutex_;
  mutable std::weak_ptr<Storage> source_;  // the storage the copy was made from
  mutable uint64_t version_ = 0;
  mutable Tensor copy_;
};

}  // namespace troupe::models
