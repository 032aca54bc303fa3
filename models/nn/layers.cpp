#include "models/nn/layers.h"

#include <cmath>

namespace troupe::models {

namespace {

Tensor uniform_fan_in(const Shape& shape, int64_t fan_in, DType dtype, Generator& generator) {
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  return rand_uniform(shape, -bound, bound, dtype, generator);
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool has_bias, DType dtype, Generator& generator) {
  if (in_features < 1 || out_features < 1)
    throw ValueError("Linear: features must be positive, got " + std::to_string(in_features) + " -> " +
                     std::to_string(out_features));
  weight = uniform_fan_in({out_features, in_features}, in_features, dtype, generator);
  register_parameter("weight", weight);
  if (has_bias) {
    bias = uniform_fan_in({out_features}, in_features, dtype, generator);
    register_parameter("bias", bias);
  }
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, const Conv2dOptions& conv_options,
               bool has_bias, DType dtype, Generator& generator)
    : options(conv_options) {
  if (in_channels < 1 || out_channels < 1 || kernel_size < 1 || options.groups < 1 ||
      in_channels % options.groups || out_channels % options.groups)
    throw ValueError("Conv2d: bad geometry: " + std::to_string(in_channels) + " -> " + std::to_string(out_channels) +
                     " channels, kernel " + std::to_string(kernel_size) + ", groups " + std::to_string(options.groups));
  const int64_t fan_in = in_channels / options.groups * kernel_size * kernel_size;
  weight = uniform_fan_in({out_channels, in_channels / options.groups, kernel_size, kernel_size}, fan_in, dtype, generator);
  register_parameter("weight", weight);
  if (has_bias) {
    bias = uniform_fan_in({out_channels}, fan_in, dtype, generator);
    register_parameter("bias", bias);
  }
}

}  // namespace troupe::models
