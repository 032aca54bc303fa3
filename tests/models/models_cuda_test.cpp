// The models on cuda:0 match their CPU results: the LSTM ensemble as GPU actors, the encoder's
// fastpaths, XLM-R classification, GatherNd, a Net training step (with the gradients staged through
// the host by GradientReducer), and a GPU actor's result handed to another without a host sync.
// Skipped without a GPU; the --device option of the examples is checked here too, on any machine.
#include <catch2/catch.hpp>

#include "actors/fork.h"
#include "devices/autograd/grad_mode.h"
#include "devices/backend.h"
#include "devices/error.h"
#include "devices/lstm_step_loop.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "devices/sync.h"
#include "examples/device_option.h"
#include "models/lstm.h"
#include "models/nn/net.h"
#include "models/nn/optimizer.h"
#include "models/train/gradient_reducer.h"
#include "models/transformer/encoder.h"
#include "models/xlmr/xlmr.h"
#include "support/close.h"
#include "support/ranks.h"
#include "support/skip.h"
#include "support/tensors.h"

using namespace troupe;
using namespace troupe::models;

namespace {

Tensor on_host(const Tensor& t) { return t.to(Device::cpu()); }

// Lengths 3, 5 and 8 padded to 8 (true = padding).
Tensor padding_mask() {
  const std::vector<int64_t> lengths{3, 5, 8};
  std::vector<bool> pad;
  for (int64_t L : lengths)
    for (int64_t s = 0; s < 8; ++s) pad.push_back(s >= L);
  return Tensor::from_vector(pad, {3, 8});
}

}  // namespace

TEST_CASE("the device option: cpu by default, cuda only where there is a GPU, else a DeviceError naming --device", "[device-cli]") {
  CHECK(example_device("cpu") == Device::cpu());
  CHECK_THROWS_AS(example_device("gpu"), DeviceError);
  if (has_backend(DeviceType::cuda)) {
    CHECK(example_device("cuda") == Device::cuda(0));
    CHECK_THROWS_AS(example_device("cuda:999"), DeviceError);
  } else {
    CHECK_THROWS_WITH(example_device("cuda"), Catch::Contains("--device cuda: no GPU here"));
  }
  cli::App app{"x"};
  std::string name = "cpu";
  add_device_option(app, name);
  const char* argv[] = {"x", "--device", "cuda:1"};
  CHECK(app.parse(3, argv) == -1);  // the program goes on
  CHECK(name == "cuda:1");
  finish(Device::cpu());  // nothing to wait for on the host
}

TEST_CASE("LSTM ensemble: members as GPU actors on their own lanes match the CPU ensemble", "[cuda]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  LSTMEnsemble cpu(3, 16, 12, /*seed=*/4);
  LSTMEnsemble cuda(3, 16, 12, /*seed=*/4, gpu);
  const Tensor x = rand_uniform({5, 2, 16}, 0, 1);
  const Tensor want = cpu.serial(x);
  const Tensor x_gpu = x.to(gpu);
  cuda.fork_members(x_gpu);  // warm-up: kernels loaded, workspaces made
  reset_sync_counts();
  const Tensor got = cuda.fork_members(x_gpu);
  CHECK(sync_count() == 0);  // queued on the members' lanes and summed on the device
  CHECK(got.device() == gpu);
  CHECK(relative_error(on_host(got), want) < 1e-4);
  CHECK(relative_error(on_host(cuda.serial(x_gpu)), want) < 1e-4);
}

TEST_CASE("LSTM ensemble at the example's shape on GPU actors: directions on two lanes, both step kernels, the CPU's sum", "[cuda][lstm_gpu]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  LSTMEnsemble cpu(2, 1024, 1024, /*seed=*/6);
  LSTMEnsemble cuda(2, 1024, 1024, /*seed=*/6, gpu);
  const Tensor x = rand_uniform({50, 50, 1024}, 0, 1);
  const Tensor want = cpu.serial(x);
  const Tensor x_gpu = x.to(gpu);
  for (LstmStepKernel kernel : {LstmStepKernel::gemm, LstmStepKernel::fused}) {
    INFO(name(kernel));
    set_lstm_step_kernel(kernel);
    CHECK(relative_error(on_host(cuda.fork_members(x_gpu)), want) < 1e-4);  // the first: launched, then graphs
    reset_sync_counts();
    reset_lstm_step_loop_counts();
    const Tensor got = cuda.fork_members(x_gpu);
    CHECK(sync_count() == 0);
    CHECK(lstm_step_loop_counts().graph == 4);  // 2 members x 2 directions, each on a lane of its own
    CHECK(relative_error(on_host(got), want) < 1e-4);
    CHECK(relative_error(on_host(cuda.serial(x_gpu)), want) < 1e-4);  // the default stream: launched
  }
  set_lstm_step_kernel(LstmStepKernel::gemm);
}

TEST_CASE("a GPU actor's result handed to another GPU actor: no host sync", "[cuda]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  ModuleActor<LSTM> first(ActorOptions{.name = "first", .device = gpu}, 8, 8, 1);
  ModuleActor<LSTM> second(ActorOptions{.name = "second", .device = gpu}, 8, 8, 2);
  LSTM first_cpu(8, 8, 1), second_cpu(8, 8, 2);
  const Tensor x = rand_uniform({4, 2, 8}, -1, 1);
  const Tensor x_gpu = x.to(gpu);
  wait(fork(second, wait(fork(first, x_gpu))));  // warm-up
  reset_sync_counts();
  const Tensor y = wait(fork(second, wait(fork(first, x_gpu))));
  CHECK(sync_count() == 0);
  CHECK(relative_error(on_host(y), second_cpu(first_cpu(x))) < 1e-4);
}

TEST_CASE("encoder on cuda: nested and dense fastpaths and the general path match the CPU", "[cuda]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  const EncoderLayerOptions o{.d_model = 32, .nhead = 4, .dim_feedforward = 64, .activation = "gelu", .batch_first = true};
  manual_seed(3);
  TransformerEncoder cpu(o, 2);
  manual_seed(3);
  TransformerEncoder cuda(o, 2);
  cuda.to(gpu);
  cpu.eval();
  cuda.eval();
  const Tensor x = rand_uniform({3, 8, 32}, -1, 1), mask = padding_mask();
  const Tensor x_gpu = x.to(gpu);
  {
    NoGradGuard no_grad;
    const Tensor want = cpu(x, mask);
    const Tensor got = cuda(x_gpu, mask);  // the mask stays on the host
    CHECK(got.device() == gpu);
    CHECK(relative_error(on_host(got), want) < 1e-4);  // zeros at padding on both
    reset_sync_counts();
    cuda(x_gpu, mask);
    CHECK(sync_count() == 0);
    cpu.set_nested(false);
    cuda.set_nested(false);
    CHECK(relative_error(on_host(cuda(x_gpu, mask)), cpu(x, mask)) < 1e-4);
  }
  // The general path (autograd on), padded positions masked alike.
  CHECK(relative_error(on_host(cuda(x_gpu, mask.to(gpu))), cpu(x, mask)) < 1e-4);
}

TEST_CASE("XLM-R classification on cuda: the same logits from host tokens", "[cuda]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  const XLMRConfig config = XLMRConfig::tiny(50, 3);
  XLMR cpu(config, 9), cuda(config, 9);
  cuda.to(gpu);
  cpu.eval();
  cuda.eval();
  const Tensor tokens = Tensor::from_vector<int64_t>({0, 7, 8, 9, 2, 0, 11, 2, 1, 1}, {2, 5});
  NoGradGuard no_grad;
  const Tensor want = cpu(tokens);
  reset_sync_counts();
  const Tensor got = cuda(tokens);
  CHECK(sync_count() == 0);  // host tokens: the mask and positions are read where they are
  CHECK(got.device() == gpu);
  CHECK(relative_error(on_host(got), want) < 1e-4);
  CHECK(relative_error(on_host(cuda(tokens.to(gpu))), want) < 1e-4);  // device tokens: the same, one sync
}

// bf16 on the GPU runs the whole layer in bf16: weights (converted once), GEMM outputs, attention's
// input and output, the residual stream and the norms' outputs (norms compute in f32 inside). Each
// rounding to bf16 is off by at most 2^-9 of the value; a layer rounds the stream about six times
// and its GEMMs add errors of ~2^-8 of their terms that partly cancel, and the post-norm keeps the
// outputs at unit scale, so two layers stay within ~1-2% of the output's largest magnitude: 4e-2
// leaves room for that and fails for any real fault (a wrong bias or weight is off by O(1)).
constexpr double kBf16EncoderTolerance = 4e-2;

TEST_CASE("encoder on cuda in bf16: nested and dense fastpaths within bf16 rounding of the f32 CPU result",
          "[cuda][bf16]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  for (const bool norm_first : {false, true}) {
    INFO((norm_first ? "pre-norm" : "post-norm"));
    const EncoderLayerOptions o{.d_model = 64, .nhead = 4, .dim_feedforward = 256, .activation = "gelu",
                                .batch_first = true, .norm_first = norm_first};
    manual_seed(5);
    TransformerEncoder cpu(o, 2);
    manual_seed(5);
    TransformerEncoder cuda(o, 2);
    cuda.to(gpu);
    cuda.set_fastpath_dtype(DType::bf16);  // the weights' bf16 copies are made here
    cpu.eval();
    cuda.eval();
    const Tensor x = rand_uniform({3, 8, 64}, -1, 1), mask = padding_mask();
    const Tensor x_gpu = x.to(gpu);
    NoGradGuard no_grad;
    const Tensor want = cpu(x, mask);  // f32 on the host
    const Tensor got = cuda(x_gpu, mask);
    CHECK(got.device() == gpu);
    CHECK(got.dtype() == DType::f32);  // bf16 inside, f32 to the caller
    CHECK(relative_error(on_host(got), want) < kBf16EncoderTolerance);  // zeros at padding on both
    const NestedTensor nested = cuda(NestedTensor::from_padded(x_gpu, mask));
    CHECK(nested.tokens().dtype() == DType::f32);
    CHECK(relative_error(on_host(nested.to_padded(mask)), want) < kBf16EncoderTolerance);
    cpu.set_nested(false);
    cuda.set_nested(false);
    CHECK(relative_error(on_host(cuda(x_gpu, mask)), cpu(x, mask)) < kBf16EncoderTolerance);
    // Weights loaded afterwards reach the bf16 copies (made again at the next forward).
    manual_seed(6);
    TransformerEncoder other(o, 2);
    other.eval();
    other.set_nested(false);  // dense like cuda now: its padding rows are computed, not zeros
    cuda.load(other.state_dict());
    const auto loaded = cuda.state_dict();
    for (const auto& [name, value] : other.state_dict()) {
      INFO(name);
      check_close(on_host(loaded.at(name)), value);  // load() wrote every parameter on the GPU
    }
    CHECK(relative_error(on_host(cuda(x_gpu, mask)), other(x, mask)) < kBf16EncoderTolerance);
    cuda.set_fastpath_dtype(DType::f32);  // the f32 fastpath reads the parameters themselves
    CHECK(relative_error(on_host(cuda(x_gpu, mask)), other(x, mask)) < 1e-4);
  }
}

// XLM-R's features are the encoder's (tolerance as above); the head (f32 on the GPU) maps them
// to logits whose scale is set by random weights: measured against their own largest magnitude,
// the features' error carries through a dense layer, tanh and a projection, 6e-2 bounds it.
TEST_CASE("XLM-R on cuda in bf16: features and logits within bf16 rounding of the f32 CPU result", "[cuda][bf16]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  const XLMRConfig config = XLMRConfig::tiny(50, 3);
  XLMR cpu(config, 9), cuda(config, 9);
  cuda.to(gpu);
  cuda.encoder.set_fastpath_dtype(DType::bf16);
  cpu.eval();
  cuda.eval();
  const Tensor tokens = Tensor::from_vector<int64_t>({0, 7, 8, 9, 2, 0, 11, 2, 1, 1}, {2, 5});
  NoGradGuard no_grad;
  CHECK(relative_error(on_host(cuda.features(tokens)), cpu.features(tokens)) < kBf16EncoderTolerance);
  const Tensor got = cuda(tokens);
  CHECK(got.device() == gpu);
  CHECK(relative_error(on_host(got), cpu(tokens)) < 6e-2);
}

TEST_CASE("gather_nd on cuda: the CPU's rows, no host sync", "[cuda]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  const Tensor data = rand_uniform({6, 7, 16}, 0, 1);
  const Tensor indices = Tensor::from_vector<int64_t>({0, 1, 5, 6, 3, 3, 0, 0}, {4, 2});
  const Tensor data_gpu = data.to(gpu), indices_gpu = indices.to(gpu);
  gather_nd(data_gpu, indices_gpu);
  reset_sync_counts();
  const Tensor got = gather_nd(data_gpu, indices_gpu);
  CHECK(sync_count() == 0);
  check_close(on_host(got), gather_nd(data, indices));
}

TEST_CASE("a Net training step on cuda: the CPU's loss and updated weights, gradients staged through the host", "[cuda]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  manual_seed(11);
  Net cpu;
  manual_seed(11);
  Net cuda;
  cuda.to(gpu);
  // Dropout draws differ between the devices' generators: eval() turns it off, the step is the same.
  cpu.eval();
  cuda.eval();
  SGD cpu_sgd(cpu.parameters(), {.lr = 0.1, .momentum = 0.5});
  SGD cuda_sgd(cuda.parameters(), {.lr = 0.1, .momentum = 0.5});
  auto world = world_of_one();
  GradientReducer reducer(*world, cuda.parameters());  // one flat buffer through the host
  CHECK(reducer.buckets() == 1);
  const Tensor x = rand_uniform({8, 1, 28, 28}, -1, 1);
  const Tensor y = Tensor::from_vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7}, {8});
  for (int step = 0; step < 2; ++step) {
    cpu_sgd.zero_grad();
    cuda_sgd.zero_grad();
    Tensor cpu_loss = nll_loss(cpu(x), y);
    Tensor cuda_loss = nll_loss(cuda(x.to(gpu)), y.to(gpu));
    cpu_loss.backward();
    cuda_loss.backward();
    reducer.finish();
    cpu_sgd.step();
    cuda_sgd.step();
    CHECK(std::abs(cuda_loss.item<float>() - cpu_loss.item<float>()) < 1e-4);
    const auto want = cpu.named_parameters(), got = cuda.named_parameters();
    for (size_t i = 0; i < want.size(); ++i) {
      INFO(want[i].first);
      CHECK(got[i].second->device() == gpu);
      CHECK(relative_error(on_host(got[i].second->detach()), want[i].second->detach()) < 1e-4);
    }
  }
}

TEST_CASE("nested tensors on cuda: packed and unpacked by one gather each, as on the host", "[cuda]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  const Tensor padded = rand_uniform({3, 4, 5}, -1, 1);
  // Row 0: padding between tokens; row 1: none; row 2: all padding.
  const Tensor mask = Tensor::from_vector<bool>({false, true, false, true, false, false, false, false, true, true, true, true}, {3, 4});
  const NestedTensor cpu = NestedTensor::from_padded(padded, mask);
  const NestedTensor cuda = NestedTensor::from_padded(padded.to(gpu), mask);
  CHECK(cuda.offsets() == cpu.offsets());
  CHECK(cuda.tokens().device() == gpu);
  check_close(on_host(cuda.tokens()), cpu.tokens());
  check_close(on_host(cuda.to_padded(mask)), cpu.to_padded(mask));
  check_close(on_host(cuda.to_padded(6)), cpu.to_padded(6));
}

TEST_CASE("flatten_grads on cuda: one flat tensor on the device, zeros for a parameter without a grad", "[cuda]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  Tensor a = Tensor::ones({2, 2}).to(gpu).set_requires_grad(), b = Tensor::ones({3}).to(gpu).set_requires_grad();
  a.set_grad(Tensor::full({2, 2}, 2.0).to(gpu));
  const Tensor flat = flatten_grads({&a, &b});
  CHECK(flat.device() == gpu);
  check_close(on_host(flat), Tensor::from_vector<float>({2, 2, 2, 2, 0, 0, 0}, {7}));
  assign_flat_grads({&a, &b}, flat);
  CHECK(b.grad().device() == gpu);
  check_close(on_host(b.grad()), Tensor::zeros({3}));
}
