#pragma once
// The layers of the Net of PyTorch's distributed tutorial, PyTorch's nn.Linear, nn.Conv2d, nn.Dropout and nn.Dropout2d with
// their default initialisation (weights kaiming-uniform with a = sqrt(5), that is uniform in
// +-1/sqrt(fan_in), and biases uniform in +-1/sqrt(fan_in)), drawn from the calling thread's
// generator (troupe::manual_seed) unless one is passed.
//
//   manual_seed(1);
//   Linear fc(320, 50);
//   Tensor y = fc(x);               // x [N, 320] -> [N, 50]
//   Generator g(7);
//   Linear seeded(320, 50, true, DType::f32, g);   // drawn from g; the thread's stream untouched
//   Conv2d conv(1, 10, 5);          // [N, 1, 28, 28] -> [N, 10, 24, 24]
//   Dropout2d drop;                 // p = 0.5 while training (module.train()), identity in eval()
#include "devices/ops.h"
#include "devices/random.h"
#include "models/nn/module.h"

namespace troupe::models {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, DType dtype = DType::f32,
         Generator& generator = thread_generator());
  Tensor forward(const Tensor& x) const { return linear(x, weight, bias); }
  Tensor operator()(const Tensor& x) const { return forward(x); }

  Tensor weight;  // [out, in]
  Tensor bias;    // [out], undefined without bias
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, const Conv2dOptions& options = {},
         bool bias = true, DType dtype = DType::f32, Generator& generator = thread_generator());
  Tensor forward(const Tensor& x) const { return conv2d(x, weight, bias, options); }
  Tensor operator()(const Tensor& x) const { return forward(x); }

  Conv2dOptions options;
  Tensor weight;  // [out, in / groups, k, k]
  Tensor bias;    // [out], undefined without bias
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5) : p(p) {}
  Tensor operator()(const Tensor& x) const { return dropout(x, p, is_training()); }
  double p;
};

class Dropout2d : public Module {
 public:
  explicit Dropout2d(double p = 0.5) : p(p) {}
  Tensor operator()(const Tensor& x) const { return dropout2d(x, p, is_training()); }
  double p;
};

}  // namespace troupe::models
