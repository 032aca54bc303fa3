// Bf16Copy: a GPU parameter's bf16 copy is made once and made again only when the parameter's
// bytes change; a host parameter is handed back as it is.
#include <catch2/catch.hpp>

#include "devices/backend.h"
#include "devices/random.h"
#include "models/nn/bf16_copy.h"
#include "support/close.h"
#include "support/skip.h"

using namespace troupe;
using namespace troupe::models;

TEST_CASE("Bf16Copy hands a host parameter back unchanged", "[bf16]") {
  Bf16Copy copy;
  const Tensor w = rand_uniform({4, 3}, -1, 1);
  CHECK(copy.of(w).storage() == w.storage());
  CHECK(copy.of(w).dtype() == DType::f32);
  CHECK_FALSE(copy.of(Tensor()).defined());
}

TEST_CASE("Bf16Copy on cuda: converted once, again after the parameter changes", "[cuda][bf16]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  Bf16Copy copy;
  const Tensor host = rand_uniform({8, 5}, -1, 1);
  Tensor w = host.to(Device::cuda(0));
  const Tensor first = copy.of(w);
  CHECK(first.dtype() == DType::bf16);
  CHECK(first.device() == Device::cuda(0));
  check_close(first.to(Device::cpu()), host.to(DType::bf16));
  CHECK(copy.of(w).storage() == first.storage());  // no second conversion
  w.mutable_raw_data();                            // a write (an optimizer step) bumps the version
  CHECK(copy.of(w).storage() != first.storage());
  const Tensor moved = rand_uniform({8, 5}, -1, 1).to(Device::cuda(0));  // new storage (to(), load())
  check_close(copy.of(moved).to(Device::cpu()), moved.to(Device::cpu()).to(DType::bf16));
  const Tensor already = moved.to(DType::bf16);
  CHECK(copy.of(already).storage() == already.storage());  // bf16 already: itself
}
