#pragma once
// Small tensors the tests build their cases from, the same on every run.
//
//   Tensor a = random_tensor({3, 4}, 7);              // f32, uniform in [-2, 2), seed 7
//   Tensor w = random_tensor({3, 4}, 8, -1.0f, 1.0f); // another range
//   Tensor i = i64({2, 0, 1}, {3});                   // an int64 tensor of these values
//   if (!has_backend(DeviceType::cuda)) ...; Tensor g = a.to(gpu);
#include <cstdint>
#include <random>
#include <vector>

#include "devices/tensor.h"

// The GPU the CUDA cases run on.
inline const troupe::Device gpu = troupe::Device::cuda(0);

// f32 values drawn uniformly from [lo, hi) by std::mt19937 seeded with `seed`.
inline troupe::Tensor random_tensor(const troupe::Shape& shape, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(troupe::numel(shape)));
  for (float& x : v) x = dist(rng);
  return troupe::Tensor::from_vector<float>(v, shape);
}

inline troupe::Tensor i64(const std::vector<int64_t>& values, const troupe::Shape& shape) {
  return troupe::Tensor::from_vector<int64_t>(values, shape);
}
