#pragma once
// Troupe in one include: tensors, ops and the registry (more layers join as they land).
//
//   #include <troupe.h>
//   troupe::Tensor c = troupe::matmul(a, b);
#include "devices/ops.h"
#include "devices/registry.h"
#include "devices/tensor.h"
