// The cuda kernels of the compute-heavy ops (lstm, conv2d, max_pool2d and their gradients, ...)
// against their CPU kernels on the same random inputs: forward and backward, several shapes and
// edge cases. TF32 stays off (the default), so f32 agrees to 1e-4 relative. Without a GPU each test
// is skipped; the CPU-only cases at the end run everywhere.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "devices/backend.h"
#include "devices/determinism.h"
#include "devices/lane.h"
#include "devices/lstm_step_loop.h"
#include "devices/random.h"
#include "devices/registry.h"
#include "support/close.h"
#include "support/skip.h"
#include "support/tensors.h"

using namespace troupe;

namespace {

#define SKIP_WITHOUT_CUDA() \
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason())
// conv2d's cuda kernels exist only when the build found cuDNN.
#define SKIP_WITHOUT_CUDA_KERNEL(op)                                                  \
  SKIP_WITHOUT_CUDA();                                                                \
  if (!OpRegistry::global().get(op).kernels.count(DeviceType::cuda))                  \
  SKIP_TEST(op << " has no cuda kernel in this build (cuDNN was not found)")

std::vector<Tensor> on_gpu(const std::vector<Tensor>& host) {
  std::vector<Tensor> out;
  for (const Tensor& t : host) out.push_back(t.to(gpu));
  return out;
}

// Runs op on the host inputs and on copies of them on cuda:0; every output agrees (floating ones to
// rtol relative to the largest value, or within atol of it everywhere; rtol 0 and integer ones
// exactly) and lives on cuda:0.
void check_against_cpu(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs = {},
                       double rtol = 1e-4, double atol = 0) {
  const std::vector<Tensor> want = call_op(op, inputs, attrs);
  const std::vector<Tensor> got = call_op(op, on_gpu(inputs), attrs);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(op << " output " << i << ": " << want[i].meta().str());
    CHECK(got[i].device() == gpu);
    REQUIRE(got[i].shape() == want[i].shape());
    REQUIRE(got[i].dtype() == want[i].dtype());
    const Tensor back = got[i].to(Device::cpu());
    if (rtol == 0 || !is_floating(want[i].dtype()))
      check_close(back, want[i]);  // exactly; NaN matches NaN
    else if (atol == 0 || max_abs_diff(back.to(DType::f32).to_vector<float>(), want[i].to(DType::f32).to_vector<float>()) > atol)
      CHECK(relative_error(back, want[i]) <= rtol);
  }
}

Tensor uniform(const Shape& shape, double scale = 1.0, DType dtype = DType::f32) {
  return rand_uniform(shape, -scale, scale, dtype);
}

// Whole numbers in [-4, 4]: many ties, so the first maximum must win on both devices.
Tensor whole_numbers(const Shape& shape, DType dtype) {
  std::vector<double> v = uniform(shape, 4.0, DType::f64).to_vector<double>();
  for (double& e : v) e = std::round(e);
  return Tensor::from_vector<double>(v, shape).to(dtype);
}

// lstm's inputs: x [T,B,C], weights and biases of hidden size H, h0 and c0 when with_state.
std::vector<Tensor> lstm_inputs(int64_t T, int64_t B, int64_t C, int64_t H, bool with_state) {
  const double k = 1.0 / std::sqrt(double(H));
  std::vector<Tensor> in{uniform({T, B, C}), uniform({4 * H, C}, k), uniform({4 * H, H}, k), uniform({4 * H}, k),
                         uniform({4 * H}, k)};
  if (with_state) {
    in.push_back(uniform({B, H}));
    in.push_back(uniform({B, H}));
  }
  return in;
}

}  // namespace

TEST_CASE("cuda lstm matches the CPU kernel", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  manual_seed(11);
  struct Case {
    int64_t T, B, C, H;
    bool state;
  };
  for (const Case& c : {Case{5, 3, 7, 8, false}, Case{1, 1, 4, 4, true}, Case{12, 16, 32, 64, true},
                        Case{0, 2, 3, 4, true}, Case{3, 1, 1, 1, false}, Case{50, 10, 64, 256, false}}) {
    INFO("T=" << c.T << " B=" << c.B << " C=" << c.C << " H=" << c.H << (c.state ? " with h0, c0" : ""));
    check_against_cpu("lstm", lstm_inputs(c.T, c.B, c.C, c.H, c.state));
  }
  // h0 without c0: c0 is zeros.
  std::vector<Tensor> in = lstm_inputs(4, 2, 3, 5, true);
  in.pop_back();
  check_against_cpu("lstm", in);
}

TEST_CASE("cuda lstm on a lane: both step kernels, launched or as a CUDA graph, give the CPU's results", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  manual_seed(12);
  auto lane = Lane::make(gpu, "lstm graph test");
  LaneGuard on(*lane);  // a stream of its own: the graph may be taken
  struct Case {
    int64_t T, B, C, H;
    bool state;
  };
  for (LstmStepKernel kernel : {LstmStepKernel::gemm, LstmStepKernel::fused}) {
    set_lstm_step_kernel(kernel);
    // The ensemble's shape, then odd ones: one step (never a graph), one row, sizes off multiples of
    // 32 and 16, more rows than a fused block holds (64).
    for (const Case& c : {Case{50, 50, 1024, 1024, false}, Case{1, 3, 37, 45, true}, Case{7, 1, 37, 45, true},
                          Case{9, 5, 33, 31, false}, Case{4, 70, 20, 17, true}}) {
      INFO(name(kernel) << " T=" << c.T << " B=" << c.B << " C=" << c.C << " H=" << c.H);
      const std::vector<Tensor> in = lstm_inputs(c.T, c.B, c.C, c.H, c.state);
      const std::vector<Tensor> want = call_op("lstm", in);
      const std::vector<Tensor> device_in = on_gpu(in);
      reset_lstm_step_loop_counts();
      const std::vector<Tensor> launched = call_op("lstm", device_in);  // the first of its shape on the lane
      const std::vector<Tensor> graphed = call_op("lstm", device_in);
      const std::vector<Tensor> again = call_op("lstm", device_in);  // the kept graph, replayed
      const LstmStepLoopCounts counts = lstm_step_loop_counts();
      CHECK(counts.graph == (c.T >= 2 ? 2u : 0u));
      CHECK(counts.launches == (c.T >= 2 ? 1u : 3u));
      for (size_t i = 0; i < want.size(); ++i) {
        INFO("output " << i);
        check_close(graphed[i].to(Device::cpu()), launched[i].to(Device::cpu()));  // the same kernels: bit for bit
        check_close(again[i].to(Device::cpu()), launched[i].to(Device::cpu()));
        CHECK(relative_error(graphed[i].to(Device::cpu()), want[i]) <= 1e-4);
      }
    }
  }
  set_lstm_step_kernel(LstmStepKernel::gemm);
  // Set to launches: no graph, the same values.
  set_lstm_step_loop(LstmStepLoop::launches);
  const std::vector<Tensor> in = lstm_inputs(6, 2, 5, 7, true);
  reset_lstm_step_loop_counts();
  const Tensor got = call_op("lstm", on_gpu(in))[0];
  set_lstm_step_loop(LstmStepLoop::graph);
  CHECK(lstm_step_loop_counts().graph == 0);
  CHECK(relative_error(got.to(Device::cpu()), call_op("lstm", in)[0]) <= 1e-4);
}

// The graph is recorded once over buffers of its own and replayed: each call's inputs go in, its
// outputs come out and stay its own, and new weights make it record again.
TEST_CASE("cuda lstm replays its graph with each call's inputs and records again when the weights move", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  manual_seed(13);
  auto lane = Lane::make(gpu, "lstm replay test");
  LaneGuard on(*lane);
  for (LstmStepKernel kernel : {LstmStepKernel::gemm, LstmStepKernel::fused}) {
    set_lstm_step_kernel(kernel);
    INFO(name(kernel));
    const int64_t T = 6, B = 3, C = 10, H = 12;
    std::vector<Tensor> first = lstm_inputs(T, B, C, H, true), second = lstm_inputs(T, B, C, H, true);
    // The second call's weights are the first's (the same device tensors); its x, h0 and c0 differ.
    for (int i = 1; i <= 4; ++i) second[i] = first[i];
    const std::vector<Tensor> moved = lstm_inputs(T, B, C, H, false);  // new weights, no state
    std::vector<Tensor> first_gpu = on_gpu(first), second_gpu = on_gpu(second);
    for (int i = 1; i <= 4; ++i) second_gpu[i] = first_gpu[i];
    reset_lstm_step_loop_counts();
    const std::vector<Tensor> launched = call_op("lstm", first_gpu);  // first of its shape: launched
    const std::vector<Tensor> recorded = call_op("lstm", first_gpu);
    const std::vector<Tensor> replayed = call_op("lstm", second_gpu);
    const std::vector<Tensor> rerecorded = call_op("lstm", on_gpu(moved));
    const std::vector<Tensor> replayed_again = call_op("lstm", second_gpu);
    CHECK(lstm_step_loop_counts().graph == 4u);
    const std::vector<Tensor> want_first = call_op("lstm", first), want_second = call_op("lstm", second),
                              want_moved = call_op("lstm", moved);
    for (size_t i = 0; i < want_first.size(); ++i) {
      INFO("output " << i);
      // Later calls leave earlier results alone: each call's outputs are copies, not the kept buffers.
      check_close(recorded[i].to(Device::cpu()), launched[i].to(Device::cpu()));
      CHECK(relative_error(recorded[i].to(Device::cpu()), want_first[i]) <= 1e-4);
      CHECK(relative_error(replayed[i].to(Device::cpu()), want_second[i]) <= 1e-4);
      CHECK(relative_error(rerecorded[i].to(Device::cpu()), want_moved[i]) <= 1e-4);
      check_close(replayed_again[i].to(Device::cpu()), replayed[i].to(Device::cpu()));
    }
  }
  set_lstm_step_kernel(LstmStepKernel::gemm);
}

TEST_CASE("cuda lstm with the fused step kernel matches the CPU kernel on the default stream", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  manual_seed(13);
  set_lstm_step_kernel(LstmStepKernel::fused);
  for (const auto& [T, B, C, H] : std::vector<std::array<int64_t, 4>>{{5, 3, 7, 8}, {3, 1, 1, 1}, {0, 2, 3, 4}, {12, 130, 32, 100}})
    check_against_cpu("lstm", lstm_inputs(T, B, C, H, true));
  set_lstm_step_kernel(LstmStepKernel::gemm);
}

TEST_CASE("cuda lstm runs both directions as the bidirectional model does", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  manual_seed(12);
  // The backward direction is lstm over the time-flipped input (models/lstm.h).
  std::vector<Tensor> in = lstm_inputs(9, 4, 6, 10, false);
  in[0] = call_op("flip", {in[0]}, {{"dims", std::vector<int64_t>{0}}})[0];
  check_against_cpu("lstm", in);
}

TEST_CASE("cuda lstm_backward matches the CPU kernel", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  manual_seed(13);
  struct Case {
    int64_t T, B, C, H;
  };
  for (const Case& c : {Case{5, 3, 7, 8}, Case{1, 1, 4, 4}, Case{12, 16, 32, 64}, Case{0, 2, 3, 4}, Case{3, 1, 1, 1},
                        Case{40, 8, 48, 128}}) {
    INFO("T=" << c.T << " B=" << c.B << " C=" << c.C << " H=" << c.H);
    std::vector<Tensor> in = lstm_inputs(c.T, c.B, c.C, c.H, true);
    in.push_back(uniform({c.T, c.B, c.H}));  // grad_output
    in.push_back(uniform({c.B, c.H}));       // grad_h_n
    in.push_back(uniform({c.B, c.H}));       // grad_c_n
    check_against_cpu("lstm_backward", in);
  }
}

TEST_CASE("cuda lstm's gradients through the tape are the CPU's", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  manual_seed(14);
  const std::vector<Tensor> host = lstm_inputs(6, 3, 5, 7, false);  // no h0, c0: the backward makes zeros
  const Tensor grad_output = uniform({6, 3, 7});
  auto gradients_on = [&](Device device) {
    std::vector<Tensor> in;
    for (const Tensor& t : host) in.push_back((device.is_cpu() ? t.clone() : t.to(device)).set_requires_grad());
    call_op("lstm", in)[0].backward(grad_output.to(device));
    std::vector<Tensor> grads;
    for (const Tensor& t : in) grads.push_back(t.grad().to(Device::cpu()));
    return grads;
  };
  const std::vector<Tensor> want = gradients_on(Device::cpu()), got = gradients_on(gpu);
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("gradient of input " << i);
    CHECK(relative_error(got[i], want[i]) <= 1e-4);
  }
}

TEST_CASE("cuda lstm rejects inputs on different devices", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  std::vector<Tensor> in = on_gpu(lstm_inputs(2, 1, 3, 4, false));
  in[2] = in[2].to(Device::cpu());
  CHECK_THROWS_AS(call_op("lstm", in), DeviceError);
}

TEST_CASE("cuda conv2d and its gradients match the CPU kernels", "[cuda]") {
  SKIP_WITHOUT_CUDA_KERNEL("conv2d");
  manual_seed(21);
  struct Case {
    Shape x, w;
    std::vector<int64_t> stride, padding, dilation;
    int64_t groups;
    bool bias;
  };
  const std::vector<Case> cases{
      {{2, 3, 8, 8}, {4, 3, 3, 3}, {1}, {0}, {1}, 1, true},
      {{1, 1, 5, 5}, {1, 1, 1, 1}, {1}, {0}, {1}, 1, false},          // batch 1, 1x1 kernel
      {{3, 4, 11, 9}, {6, 4, 3, 2}, {2, 1}, {1, 2}, {1}, 1, true},    // stride and padding per dim
      {{2, 6, 10, 10}, {6, 2, 3, 3}, {1}, {2}, {2}, 3, true},         // groups and dilation
      {{4, 16, 14, 14}, {32, 16, 5, 5}, {2}, {2}, {1}, 1, true},
      {{8, 64, 28, 28}, {64, 64, 3, 3}, {1}, {1}, {1}, 1, false}};
  for (DType dtype : {DType::f32, DType::f64})
    for (const Case& c : cases) {
      INFO(name(dtype) << " x " << to_string(c.x) << " w " << to_string(c.w) << " groups " << c.groups);
      const Attrs attrs{{"stride", c.stride}, {"padding", c.padding}, {"dilation", c.dilation}, {"groups", c.groups}};
      const Tensor x = uniform(c.x, 1.0, dtype), w = uniform(c.w, 0.5, dtype);
      std::vector<Tensor> in{x, w};
      if (c.bias) in.push_back(uniform({c.w[0]}, 1.0, dtype));
      check_against_cpu("conv2d", in, attrs);
      const Tensor y = call_op("conv2d", in, attrs)[0];
      const Tensor grad = uniform(y.shape(), 1.0, dtype);
      Attrs input_attrs = attrs;
      input_attrs.set("input_shape", std::vector<int64_t>(c.x.begin(), c.x.end()));
      check_against_cpu("conv2d_backward_input", {grad, w}, input_attrs);
      Attrs weight_attrs = attrs;
      weight_attrs.set("weight_shape", std::vector<int64_t>(c.w.begin(), c.w.end())).set("bias", c.bias);
      check_against_cpu("conv2d_backward_weight", {grad, x}, weight_attrs);
    }
}

TEST_CASE("cuda conv2d with deterministic kernels repeats bit for bit", "[cuda]") {
  SKIP_WITHOUT_CUDA_KERNEL("conv2d");
  manual_seed(22);
  const bool was = deterministic_kernels();
  set_deterministic_kernels(true);
  const Attrs attrs{{"padding", std::vector<int64_t>{1}},
                    {"weight_shape", std::vector<int64_t>{16, 8, 3, 3}},
                    {"bias", true}};
  const Tensor x = uniform({8, 8, 16, 16}).to(gpu), grad = uniform({8, 16, 16, 16}).to(gpu);
  const auto first = call_op("conv2d_backward_weight", {grad, x}, attrs);
  const auto second = call_op("conv2d_backward_weight", {grad, x}, attrs);
  set_deterministic_kernels(was);
  CHECK(first[0].to_vector<float>() == second[0].to_vector<float>());
  CHECK(first[1].to_vector<float>() == second[1].to_vector<float>());
}

TEST_CASE("cuda conv2d rejects inputs on different devices", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  CHECK_THROWS_AS(call_op("conv2d", {uniform({1, 2, 4, 4}).to(gpu), uniform({2, 2, 3, 3})}), DeviceError);
}

TEST_CASE("cuda max_pool2d and its gradient match the CPU kernels", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  manual_seed(31);
  struct Case {
    Shape x;
    std::vector<int64_t> kernel, stride, padding;
  };
  const std::vector<Case> cases{{{2, 3, 8, 8}, {2}, {}, {0}},
                                {{1, 1, 5, 7}, {3}, {1}, {1}},          // overlapping windows, padding
                                {{3, 4, 9, 11}, {3, 2}, {2, 1}, {1, 0}},
                                {{1, 2, 1, 1}, {1}, {}, {0}},
                                {{8, 16, 32, 32}, {3}, {2}, {1}}};
  for (DType dtype : {DType::f32, DType::f64})
    for (const Case& c : cases) {
      INFO(name(dtype) << " x " << to_string(c.x));
      const Attrs attrs{{"kernel_size", c.kernel}, {"stride", c.stride}, {"padding", c.padding}};
      const Tensor x = whole_numbers(c.x, dtype);
      check_against_cpu("max_pool2d", {x}, attrs, 0.0);
      const auto pooled = call_op("max_pool2d", {x}, attrs);
      const Tensor grad = uniform(pooled[0].shape(), 1.0, dtype);
      const Attrs back{{"input_shape", std::vector<int64_t>(c.x.begin(), c.x.end())}};
      check_against_cpu("max_pool2d_backward", {grad, pooled[1]}, back, 1e-6);
      const bool was = deterministic_kernels();
      set_deterministic_kernels(true);
      check_against_cpu("max_pool2d_backward", {grad, pooled[1]}, back, 0.0);  // the CPU's order: exact
      set_deterministic_kernels(was);
    }
}

TEST_CASE("cuda max_pool2d keeps NaN as the maximum", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  const Tensor x = Tensor::from_vector<float>({1, NAN, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  check_against_cpu("max_pool2d", {x}, {{"kernel_size", std::vector<int64_t>{2}}, {"stride", std::vector<int64_t>{1}}},
                    0.0);
}

TEST_CASE("cuda layer_norm_backward matches the CPU kernel", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  manual_seed(41);
  struct Case {
    Shape x;
    std::vector<int64_t> norm;
    bool affine;
  };
  for (DType dtype : {DType::f32, DType::f64})
    for (const Case& c : {Case{{4, 16}, {16}, true}, Case{{1, 1}, {1}, true}, Case{{3, 5, 8}, {5, 8}, false},
                          Case{{64, 768}, {768}, true}, Case{{2, 3, 1000}, {1000}, false}}) {
      INFO(name(dtype) << " x " << to_string(c.x) << (c.affine ? " with weight" : ""));
      std::vector<Tensor> in{uniform(c.x, 1.0, dtype), uniform(c.x, 2.0, dtype)};
      if (c.affine) in.push_back(uniform(Shape(c.norm.begin(), c.norm.end()), 1.0, dtype));
      std::swap(in[0], in[1]);  // (grad, x[, weight])
      // Over one element, dx is zero but for rounding of 1/sqrt(eps) * grad * weight (~300 * ulp):
      // both devices' noise, so it is held to an absolute bound, not to its own scale.
      const double atol = numel(c.x) == 1 ? 1e-3 : 0;
      check_against_cpu("layer_norm_backward", in, {{"normalized_shape", c.norm}, {"eps", 1e-5}}, 1e-4, atol);
    }
}

TEST_CASE("cuda linear_bf16 matches the CPU kernel", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  manual_seed(51);
  struct Case {
    Shape x;
    int64_t out;
    bool bias;
    std::string activation, out_dtype;
  };
  for (const Case& c : {Case{{4, 32}, 16, true, "none", "f32"}, Case{{1, 8}, 3, false, "relu", "f32"},
                        Case{{2, 5, 64}, 48, true, "gelu", "f32"}, Case{{64, 256}, 128, true, "gelu", "bf16"},
                        Case{{3, 7}, 5, false, "none", "bf16"}}) {
    INFO("x " << to_string(c.x) << " -> " << c.out << " " << c.activation << " " << c.out_dtype);
    const int64_t in = c.x.back();
    std::vector<Tensor> inputs{uniform(c.x), uniform({c.out, in}, 1.0 / std::sqrt(double(in)))};
    if (c.bias) inputs.push_back(uniform({c.out}));
    const Attrs attrs{{"activation", c.activation}, {"out_dtype", c.out_dtype}};
    // A bf16 output may round a hair's different sum the other way: one bf16 step (2^-8).
    check_against_cpu("linear_bf16", inputs, attrs, c.out_dtype == "bf16" ? 1e-2 : 1e-4);
    inputs[0] = inputs[0].to(DType::bf16);  // x already rounded
    check_against_cpu("linear_bf16", inputs, attrs, c.out_dtype == "bf16" ? 1e-2 : 1e-4);
  }
}

TEST_CASE("cuda packed_attention matches the CPU kernel", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  manual_seed(61);
  struct Case {
    std::vector<int64_t> lengths, keys;  // keys empty: no key_lengths input
    int64_t d, heads;
  };
  for (const Case& c : {Case{{3, 5, 1}, {}, 16, 2}, Case{{1}, {}, 8, 1}, Case{{4, 0, 6}, {}, 64, 4},
                        Case{{7, 2, 9}, {5, 2, 1}, 32, 2}, Case{{128, 77, 3, 200}, {100, 77, 3, 1}, 768, 12},
                        Case{{5, 3}, {0, 3}, 16, 4}, Case{{6}, {}, 512, 2}}) {
    std::vector<int64_t> offsets{0};
    for (int64_t l : c.lengths) offsets.push_back(offsets.back() + l);
    INFO("offsets " << to_string(AttrValue(offsets)) << " d " << c.d << " heads " << c.heads);
    std::vector<Tensor> in{uniform({offsets.back(), 3 * c.d}, 2.0),
                           Tensor::from_vector<int64_t>(offsets, {int64_t(offsets.size())})};
    if (!c.keys.empty()) in.push_back(Tensor::from_vector<int64_t>(c.keys, {int64_t(c.keys.size())}));
    const Attrs attrs{{"heads", c.heads}};
    const Tensor want = call_op("packed_attention", in, attrs)[0];
    const Tensor got = call_op("packed_attention", on_gpu(in), attrs)[0];
    CHECK(got.device() == gpu);
    check_close(got.to(Device::cpu()), want, {.rtol = 1e-4, .atol = 1e-5});  // rows with no keys: NaN on both
  }
}

// XLM-R base (12 heads, d 768) and large (16 heads, d 1024): heads of 64 columns, the tensor-core
// kernel in bf16 and the tiled FMA kernel in f32, lengths 1 to 512 in one batch with an empty
// sequence, tiles that straddle sequences, with and without key_lengths (one of them 0: NaN rows).
// f32 keeps the CPU's results to 1e-4. bf16 is held to the CPU's bf16 contract (attend in f32 from
// the same bf16 values, round once): |got - want| <= 1e-2 + 1e-2 |want|, since the kernel rounds the
// softmax weights to bf16 before their product with v (FlashAttention-2's way: 2^-9 of each weight,
// so at most 2^-9 of max |v| = 2 in all) and the two results may round to neighbouring bf16 values
// (2^-7 relative apart at most).
TEST_CASE("cuda packed_attention matches the CPU kernel at XLM-R shapes, f32 and bf16", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  manual_seed(67);
  const std::vector<int64_t> lengths{1, 7, 64, 65, 250, 512, 0, 33, 130};
  const std::vector<int64_t> keys{1, 3, 64, 65, 0, 512, 0, 20, 129};
  std::vector<int64_t> offsets{0};
  for (int64_t l : lengths) offsets.push_back(offsets.back() + l);
  const Tensor starts = Tensor::from_vector<int64_t>(offsets, {int64_t(offsets.size())});
  const Tensor key_lengths = Tensor::from_vector<int64_t>(keys, {int64_t(keys.size())});
  for (const auto& [d, heads] : {std::pair<int64_t, int64_t>{768, 12}, {1024, 16}}) {
    const Tensor qkv = uniform({offsets.back(), 3 * d}, 2.0);
    for (DType dtype : {DType::f32, DType::bf16}) {
      for (const bool with_keys : {false, true}) {
        INFO("d " << d << " heads " << heads << " " << name(dtype) << (with_keys ? " with key_lengths" : ""));
        std::vector<Tensor> in{qkv.to(dtype), starts};
        if (with_keys) in.push_back(key_lengths);
        const Attrs attrs{{"heads", heads}};
        const Tensor want = call_op("packed_attention", in, attrs)[0];
        const Tensor got = call_op("packed_attention", on_gpu(in), attrs)[0];
        CHECK(got.device() == gpu);
        REQUIRE(got.dtype() == dtype);
        if (dtype == DType::f32)
          check_close(got.to(Device::cpu()), want, {.rtol = 1e-4, .atol = 1e-5});
        else
          check_close(got.to(Device::cpu()).to(DType::f32), want.to(DType::f32), {.rtol = 1e-2, .atol = 1e-2});
      }
    }
  }
}

// bf16 heads the tensor cores do not take (32 and 80 columns) go to the tiled kernel, which reads and
// writes bf16 and computes in f32: the CPU's bf16 result to one rounding apart.
TEST_CASE("cuda packed_attention in bf16 for other head widths", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  manual_seed(73);
  const std::vector<int64_t> offsets{0, 5, 5, 90, 91};
  const Tensor starts = Tensor::from_vector<int64_t>(offsets, {int64_t(offsets.size())});
  for (const auto& [d, heads] : {std::pair<int64_t, int64_t>{64, 2}, {240, 3}, {256, 1}}) {
    INFO("d " << d << " heads " << heads);
    const std::vector<Tensor> in{uniform({offsets.back(), 3 * d}, 2.0).to(DType::bf16), starts};
    const Tensor want = call_op("packed_attention", in, {{"heads", heads}})[0];
    const Tensor got = call_op("packed_attention", on_gpu(in), {{"heads", heads}})[0];
    REQUIRE(got.dtype() == DType::bf16);
    check_close(got.to(Device::cpu()).to(DType::f32), want.to(DType::f32), {.rtol = 1e-2, .atol = 1e-2});
  }
}

TEST_CASE("cuda sgd_update and adam_update match the CPU kernels", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  manual_seed(71);
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(name(dtype));
    const Tensor p = uniform({33, 65}, 1.0, dtype), g = uniform({33, 65}, 1.0, dtype);
    const Tensor b = uniform({33, 65}, 1.0, dtype);
    check_against_cpu("sgd_update", {p, g}, {{"lr", 0.1}, {"weight_decay", 0.01}}, 1e-6);
    check_against_cpu("sgd_update", {p, g}, {{"lr", 0.1}, {"momentum", 0.9}}, 1e-6);  // the first step
    check_against_cpu("sgd_update", {p, g, b}, {{"lr", 0.1}, {"momentum", 0.9}, {"dampening", 0.1}}, 1e-6);
    check_against_cpu("sgd_update", {p, g, b}, {{"lr", 0.1}, {"momentum", 0.9}, {"nesterov", true}}, 1e-6);
    const Tensor m = uniform({33, 65}, 0.1, dtype), v = rand_uniform({33, 65}, 0.0, 0.01, dtype);
    const Tensor v_max = rand_uniform({33, 65}, 0.0, 0.02, dtype);
    check_against_cpu("adam_update", {p, g, m, v}, {{"lr", 1e-3}, {"step", int64_t{1}}}, 1e-6);
    check_against_cpu("adam_update", {p, g, m, v, v_max}, {{"lr", 1e-2}, {"weight_decay", 0.01}, {"step", int64_t{7}}},
                      1e-6);
  }
  CHECK_THROWS_AS(call_op("sgd_update", {Tensor::zeros({2}).to(gpu), Tensor::zeros({2})}, {{"lr", 0.1}}), DeviceError);
}

TEST_CASE("lstm step loop: a CUDA graph only on a stream of the caller's own, uncaptured, seen, two steps or more, "
          "not after a failed capture") {
  const LstmStepSite site{.steps = 50, .own_stream = true, .capturing = false, .shape_seen = true, .capture_failed = false};
  CHECK(choose_lstm_step_loop(LstmStepLoop::graph, site) == LstmStepLoop::graph);
  CHECK(choose_lstm_step_loop(LstmStepLoop::launches, site) == LstmStepLoop::launches);
  auto with = [&](auto change) {
    LstmStepSite s = site;
    change(s);
    return choose_lstm_step_loop(LstmStepLoop::graph, s);
  };
  CHECK(with([](LstmStepSite& s) { s.steps = 1; }) == LstmStepLoop::launches);
  CHECK(with([](LstmStepSite& s) { s.steps = 2; }) == LstmStepLoop::graph);
  CHECK(with([](LstmStepSite& s) { s.own_stream = false; }) == LstmStepLoop::launches);  // the shared default stream
  CHECK(with([](LstmStepSite& s) { s.capturing = true; }) == LstmStepLoop::launches);    // inside a CapturedWork
  CHECK(with([](LstmStepSite& s) { s.shape_seen = false; }) == LstmStepLoop::launches);  // the warm-up run
  CHECK(with([](LstmStepSite& s) { s.capture_failed = true; }) == LstmStepLoop::launches);
  CHECK(parse_lstm_step_kernel("fused") == LstmStepKernel::fused);
  CHECK(std::string(name(LstmStepKernel::gemm)) == "gemm");
  CHECK_THROWS_WITH(parse_lstm_step_kernel("cudnn"), Catch::Contains("expected gemm or fused, got 'cudnn'"));
  CHECK(parse_lstm_step_loop("graph") == LstmStepLoop::graph);
  CHECK(parse_lstm_step_loop("launches") == LstmStepLoop::launches);
  CHECK(std::string(name(LstmStepLoop::launches)) == "launches");
  CHECK_THROWS_WITH(parse_lstm_step_loop("fused"), Catch::Contains("expected graph or launches, got 'fused'"));
}

TEST_CASE("cuda add_layer_norm matches the CPU kernel", "[cuda][add_layer_norm]") {
  SKIP_WITHOUT_CUDA();
  manual_seed(61);
  // 1024: whole 16-byte packs; 37: the scalar path; 20000: a row too long to keep in shared memory.
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const Shape& shape : {Shape{5, 1024}, Shape{2, 3, 37}, Shape{2, 20000}}) {
      INFO(name(dtype) << " " << to_string(shape));
      const int64_t d = shape.back();
      const std::vector<Tensor> inputs{uniform(shape, 2.0, dtype), uniform(shape, 1.0, dtype), uniform({d}),
                                       uniform({d})};
      // Both compute in f32 and round once: f32 agrees to 1e-5 of the largest value, bf16 to a
      // bf16 step (2^-8) where the f32 values differ by a hair across a rounding boundary.
      const double rtol = dtype == DType::bf16 ? 1e-2 : 1e-5;
      check_against_cpu("add_layer_norm", inputs, {{"eps", 1e-5}}, rtol);
      check_against_cpu("add_layer_norm", inputs, {{"eps", 1e-5}, {"return_sum", true}}, rtol);
      check_against_cpu("add_layer_norm", {inputs[0], inputs[1]}, {{"eps", 1e-5}}, rtol);
    }
  }
}

// The encoder converts its weights to bf16 once and passes them in bf16; the product must be f32
// linear's to within bf16's rounding of the operands: each of x and w carries a relative error of
// at most 2^-9, so each product term is off by ~2^-8 of its size and the k terms' errors partly
// cancel; 1.5e-2 of the output's largest magnitude bounds that with room for k = 1024.
TEST_CASE("cuda linear_bf16 with pre-converted bf16 weights against f32 linear", "[cuda][bf16]") {
  SKIP_WITHOUT_CUDA();
  manual_seed(62);
  const Tensor x = uniform({77, 1024}), w = uniform({512, 1024}, 1.0 / 32), b = uniform({512});
  const Tensor w16 = w.to(gpu).to(DType::bf16), b16 = b.to(gpu).to(DType::bf16);
  const Tensor x_gpu = x.to(gpu);
  struct Case {
    std::string activation;
    DType out;
  };
  for (const Case& c : {Case{"none", DType::f32}, Case{"relu", DType::f32}, Case{"gelu", DType::f32},
                        Case{"none", DType::bf16}, Case{"relu", DType::bf16}, Case{"gelu", DType::bf16}}) {
    INFO(c.activation << " -> " << name(c.out));
    Tensor want = call_op("linear", {x, w, b})[0];
    if (c.activation == "relu") want = call_op("relu", {want})[0];
    if (c.activation == "gelu") want = call_op("gelu", {want}, {{"approximate", std::string("none")}})[0];
    const Attrs attrs{{"activation", c.activation}, {"out_dtype", std::string(name(c.out))}};
    const Tensor got = call_op("linear_bf16", {x_gpu, w16, b16}, attrs)[0];
    CHECK(got.dtype() == c.out);
    CHECK(relative_error(got.to(Device::cpu()).to(DType::f32), want) < 1.5e-2);
    // bf16 rows in, the same as f32 rows that round to them; against the CPU kernel on the same
    // bf16 operands the only difference left is the order of the f32 sums (and the bf16 output's rounding).
    const Tensor same = call_op("linear_bf16", {x_gpu.to(DType::bf16), w16, b16}, attrs)[0];
    CHECK(relative_error(same.to(Device::cpu()).to(DType::f32), got.to(Device::cpu()).to(DType::f32)) < 1e-2);
    const Tensor cpu = call_op("linear_bf16", {x, w16.to(Device::cpu()), b16.to(Device::cpu())}, attrs)[0];
    CHECK(relative_error(got.to(Device::cpu()).to(DType::f32), cpu.to(DType::f32)) < (c.out == DType::bf16 ? 1e-2 : 1e-4));
  }
}

// elementwise.cu picks a kernel per call: 128-bit packs for aligned contiguous operands, 32-bit
// strided indexing for views and broadcasts that fit, 64-bit otherwise. Each agrees with the CPU.
TEST_CASE("cuda elementwise: packed, 32-bit strided and broadcast paths match the CPU", "[cuda][elementwise]") {
  SKIP_WITHOUT_CUDA();
  manual_seed(63);
  for (const DType dtype : {DType::f32, DType::bf16}) {
    INFO(name(dtype));
    const Tensor a = uniform({129, 37}, 2.0, dtype), b = uniform({129, 37}, 2.0, dtype);
    const Tensor a_gpu = a.to(gpu), b_gpu = b.to(gpu);
    auto same = [&](const Tensor& got, const Tensor& want) {
      CHECK(got.device() == gpu);
      check_close(got.to(Device::cpu()), want);  // one rounding of the same f32 value on both
    };
    same(call_op("add", {a_gpu, b_gpu})[0], call_op("add", {a, b})[0]);  // packs and a tail of 4773 % 8
    same(call_op("mul", {a_gpu, b_gpu})[0], call_op("mul", {a, b})[0]);
    same(call_op("gt", {a_gpu, b_gpu})[0], call_op("gt", {a, b})[0]);  // bool out: strided 32-bit
    // A view one element in: not 16-byte aligned, so the scalar paths.
    const Tensor a_view = a.reshape({129 * 37}).slice(0, 1, 4001), b_view = b.reshape({129 * 37}).slice(0, 1, 4001);
    same(call_op("sub", {a_gpu.reshape({129 * 37}).slice(0, 1, 4001), b_gpu.reshape({129 * 37}).slice(0, 1, 4001)})[0],
         call_op("sub", {a_view, b_view})[0]);
    same(call_op("relu", {a_gpu.reshape({129 * 37}).slice(0, 1, 4001)})[0], call_op("relu", {a_view})[0]);
    same(call_op("neg", {a_gpu})[0], call_op("neg", {a})[0]);
    // Broadcasts and a transpose: strided with 32-bit offsets.
    const Tensor row = uniform({1, 37}, 1.0, dtype), column = uniform({129, 1}, 1.0, dtype);
    same(call_op("add", {a_gpu, row.to(gpu)})[0], call_op("add", {a, row})[0]);
    same(call_op("mul", {column.to(gpu), row.to(gpu)})[0], call_op("mul", {column, row})[0]);
    same(call_op("add", {a_gpu.transpose(0, 1), b_gpu.transpose(0, 1)})[0],
         call_op("add", {a.transpose(0, 1), b.transpose(0, 1)})[0]);
    // Transcendentals: the GPU's and the host's libm may differ in the last f32 bit.
    CHECK(relative_error(call_op("exp", {a_gpu})[0].to(Device::cpu()).to(DType::f32),
                         call_op("exp", {a})[0].to(DType::f32)) < (dtype == DType::bf16 ? 1e-2 : 1e-5));
  }
}
