// SGD and Adam on parameters living on cuda:0 (their fused sgd_update/adam_update kernels) follow
// the same parameters on the host step for step. Skipped without a GPU.
#include <catch2/catch.hpp>

#include <functional>
#include <memory>

#include "devices/backend.h"
#include "devices/random.h"
#include "models/nn/optimizer.h"
#include "support/close.h"
#include "support/skip.h"

using namespace troupe;
using namespace troupe::models;

namespace {

// Runs four steps of the optimizer make() builds on a host parameter and on its copy on cuda:0,
// with the same gradients; the cuda parameter stays the same tensor, on the device.
void check_follows_host(const std::function<std::unique_ptr<Optimizer>(std::vector<Tensor*>)>& make) {
  manual_seed(5);
  Tensor host = rand_uniform({17, 9}, -1, 1).set_requires_grad();
  Tensor gpu = host.detach().to(Device::cuda(0)).set_requires_grad();
  auto on_host = make({&host});
  auto on_gpu = make({&gpu});
  for (int step = 0; step < 4; ++step) {
    const Tensor grad = rand_uniform({17, 9}, -1, 1);
    host.set_grad(grad);
    gpu.set_grad(grad.to(Device::cuda(0)));
    on_host->step();
    on_gpu->step();
    CHECK(gpu.device() == Device::cuda(0));
    CHECK(gpu.requires_grad());
    CHECK(relative_error(gpu.detach().to(Device::cpu()), host.detach()) < 1e-6);
  }
}

}  // namespace

TEST_CASE("SGD and Adam step parameters on cuda as on the host", "[cuda]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  check_follows_host([](auto params) { return std::make_unique<SGD>(params, SGDOptions{.lr = 0.1}); });
  check_follows_host([](auto params) {
    return std::make_unique<SGD>(params,
                                 SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
  });
  check_follows_host([](auto params) { return std::make_unique<Adam>(params, AdamOptions{.lr = 0.01}); });
  check_follows_host([](auto params) {
    return std::make_unique<Adam>(params, AdamOptions{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
  });
}
