#include <catch2/catch.hpp>

#include <cmath>

#include "devices/autograd/grad_mode.h"
#include "devices/error.h"
#include "devices/io/safetensors.h"
#include "devices/ops.h"
#include "models/transformer/encoder.h"
#include "support/close.h"

using namespace troupe;
using namespace troupe::models;

namespace {

const std::map<std::string, Tensor>& fixture() {
  static auto f = read_safetensors(std::string(TROUPE_FIXTURES) + "/transformer/transformer_small.safetensors");
  return f;
}

EncoderLayerOptions small_options(const std::string& name) {
  const bool post = name == "post";
  return {.d_model = 16, .nhead = 2, .dim_feedforward = 32, .dropout = 0.0, .activation = post ? "relu" : "gelu",
          .batch_first = post, .norm_first = !post};
}

// The encoder of fixture `name` ("post": post-LN relu batch_first; "pre": pre-LN gelu [S,B,d]).
std::unique_ptr<TransformerEncoder> fixture_encoder(const std::string& name) {
  auto encoder = std::make_unique<TransformerEncoder>(small_options(name), 2);
  std::map<std::string, Tensor> state;
  for (const auto& [key, value] : fixture())
    if (key.rfind(name + ".layers.", 0) == 0) state[key.substr(name.size() + 1)] = value;
  encoder->load(state);
  encoder->eval();
  return encoder;
}

// relative_error over the real tokens of [B, S, d] tensors (padded positions zeroed on both sides).
double masked_relative_error(const Tensor& a, const Tensor& b, const Tensor& mask) {
  const Tensor keep = where(mask.unsqueeze(2), Tensor::zeros({}), Tensor::ones({}));
  return relative_error(mul(a, keep), mul(b, keep));
}

Tensor seq_first(const Tensor& x, bool batch_first) { return batch_first ? x : x.transpose(0, 1); }

}  // namespace

TEST_CASE("the encoder matches PyTorch's nn.TransformerEncoder, both norm orders and paths", "[transformer]") {
  for (const std::string name : {"post", "pre"}) {
    INFO(name);
    auto encoder = fixture_encoder(name);
    const bool bf = encoder->options.batch_first;
    const Tensor x = fixture().at(name + ".x"), mask = fixture().at(name + ".mask");
    const Tensor none = Tensor::zeros({3, 5}, DType::boolean);
    // The general path (grad mode on), then the fastpath (NoGradGuard).
    const Tensor slow = seq_first(encoder->forward(seq_first(x, bf)), bf);
    const Tensor slow_masked = seq_first(encoder->forward(seq_first(x, bf), mask), bf);
    CHECK(masked_relative_error(slow, fixture().at(name + ".out"), none) < 1e-4);
    CHECK(masked_relative_error(slow_masked, fixture().at(name + ".out_masked"), mask) < 1e-4);
    NoGradGuard no_grad;
    REQUIRE(encoder->takes_fastpath());
    const Tensor fast = seq_first(encoder->forward(seq_first(x, bf)), bf);
    const Tensor fast_masked = seq_first(encoder->forward(seq_first(x, bf), mask), bf);
    CHECK(masked_relative_error(fast, fixture().at(name + ".out"), none) < 1e-4);
    CHECK(masked_relative_error(fast_masked, fixture().at(name + ".out_masked"), mask) < 1e-4);
    // The fastpath never computes padding: its padded positions are zeros.
    CHECK(max(abs(fast_masked.select(0, 2).slice(0, 2, 5))).item<float>() == 0.0f);
  }
}

TEST_CASE("the bf16 fastpath stays within bf16's rounding of PyTorch's output, nested and dense", "[transformer][bf16]") {
  for (const std::string name : {"post", "pre"}) {
    INFO(name);
    auto encoder = fixture_encoder(name);
    const bool bf = encoder->options.batch_first;
    const Tensor x = fixture().at(name + ".x"), mask = fixture().at(name + ".mask");
    NoGradGuard no_grad;
    encoder->set_fastpath_dtype(DType::bf16);
    REQUIRE(encoder->fastpath_dtype() == DType::bf16);
    const Tensor nested = seq_first(encoder->forward(seq_first(x, bf), mask), bf);
    encoder->set_nested(false);
    const Tensor dense = seq_first(encoder->forward(seq_first(x, bf), mask), bf);
    // Operands rounded to 8 bits of mantissa through 2 layers of layer-normed outputs: ~1e-2,
    // not the 1e-4 of f32 (and not equal to it: the bf16 GEMMs did run).
    const double nested_error = masked_relative_error(nested, fixture().at(name + ".out_masked"), mask);
    CHECK(nested_error < 2e-2);
    CHECK(nested_error > 1e-6);
    CHECK(masked_relative_error(dense, fixture().at(name + ".out_masked"), mask) < 2e-2);
    CHECK(max(abs(nested.select(0, 2).slice(0, 2, 5))).item<float>() == 0.0f);
  }
  auto encoder = fixture_encoder("post");
  CHECK_THROWS_AS(encoder->set_fastpath_dtype(DType::f16), DTypeError);
  CHECK_THROWS_WITH(encoder->set_fastpath_dtype(DType::f64), Catch::Contains("set_fastpath_dtype") && Catch::Contains("f64"));
}

TEST_CASE("the general path records the tape, so the encoder trains", "[transformer]") {
  auto encoder = fixture_encoder("post");
  encoder->train();
  const Tensor x = fixture().at("post.x");
  Tensor loss = sum(mul(encoder->forward(x, fixture().at("post.mask")), 0.01));
  loss.backward();
  const Tensor* w = encoder->named_parameters()[0].second;  // layers.0.self_attn.in_proj_weight
  REQUIRE(w->grad().defined());
  CHECK(max(abs(w->grad())).item<float>() > 0.0f);
}

TEST_CASE("nested tensors round-trip with padded ones", "[transformer][nested]") {
  const Tensor x = Tensor::arange(3 * 4 * 2).reshape({3, 4, 2});
  const Tensor mask = Tensor::from_vector<bool>({false, false, false, false, false, true, true, true,
                                                 false, false, true, true}, {3, 4});
  const NestedTensor n = NestedTensor::from_padded(x, mask);
  CHECK(n.tokens().shape() == Shape{7, 2});
  CHECK(n.offsets() == std::vector<int64_t>{0, 4, 5, 7});
  CHECK(n.max_length() == 4);
  const Tensor back = n.to_padded();
  CHECK(back.to_vector<float>() == where(mask.unsqueeze(2), Tensor::zeros({}), x).to_vector<float>());
  const NestedTensor m = NestedTensor::from_list({x.select(0, 0), x.select(0, 1).slice(0, 0, 1)});
  CHECK(m.to_padded(6).shape() == Shape{2, 6, 2});
  CHECK(m.unbind()[1].to_vector<float>() == std::vector<float>{8, 9});
  CHECK_THROWS_AS(NestedTensor::from_padded(x, Tensor::zeros({3, 3}, DType::boolean)), ShapeError);
  CHECK(n.to_padded(mask).to_vector<float>() == back.to_vector<float>());
  // Padding between tokens is left out too, and to_padded(mask) puts every token back in place.
  const Tensor holes = Tensor::from_vector<bool>({false, true, false, true, true, false, false, false,
                                                  true, true, true, true}, {3, 4});
  const NestedTensor h = NestedTensor::from_padded(x, holes);
  CHECK(h.offsets() == std::vector<int64_t>{0, 2, 5, 5});
  CHECK(h.tokens().to_vector<float>() == std::vector<float>{0, 1, 4, 5, 10, 11, 12, 13, 14, 15});
  CHECK(h.to_padded(holes).to_vector<float>() == where(holes.unsqueeze(2), Tensor::zeros({}), x).to_vector<float>());
  CHECK_FALSE(trailing_padding(holes));
  CHECK(trailing_padding(mask));
  CHECK_THROWS_WITH(h.to_padded(mask), Catch::Contains("row 0 has 4 tokens, sequence 0 has 2"));
  CHECK_THROWS_AS(h.to_padded(Tensor::zeros({2, 4}, DType::boolean)), ShapeError);
  CHECK_THROWS_WITH(sequence_lengths(holes), Catch::Contains("trailing"));
  CHECK_THROWS_AS(n.to_padded(3), ShapeError);
  CHECK_THROWS_AS(NestedTensor::from_list({x.select(0, 0), Tensor::zeros({2, 3})}), ShapeError);
}

TEST_CASE("padding between tokens: the fastpaths agree with the general path on every real token", "[transformer][nested]") {
  auto encoder = fixture_encoder("post");  // batch first
  const Tensor x = fixture().at("post.x");  // [3, 5, 16]
  const Tensor holes = Tensor::from_vector<bool>({false, true, false, false, true,   // a hole and a trailing pad
                                                  true, false, false, true, false,   // leading, inner
                                                  false, false, false, false, false}, {3, 5});
  const Tensor general = encoder->forward(x, holes);  // grad mode on: the general path, any mask
  NoGradGuard no_grad;
  REQUIRE(encoder->takes_fastpath());
  const Tensor nested = encoder->forward(x, holes);
  CHECK(masked_relative_error(nested, general, holes) < 1e-4);
  CHECK(max(abs(mul(nested, holes.unsqueeze(2).to(DType::f32)))).item<float>() == 0.0f);  // zeros at padding
  encoder->set_nested(false);  // the dense fastpath takes the general path for such a mask
  CHECK(masked_relative_error(encoder->forward(x, holes), general, holes) < 1e-4);
}

TEST_CASE("encoder errors name the module and the shapes", "[transformer][errors]") {
  CHECK_THROWS_WITH(MultiheadAttention(10, 3), Catch::Contains("MultiheadAttention") && Catch::Contains("num_heads"));
  EncoderLayerOptions bad = small_options("post");
  bad.activation = "tanh";
  CHECK_THROWS_AS(TransformerEncoderLayer(bad), ValueError);
  auto encoder = fixture_encoder("post");
  CHECK_THROWS_WITH(encoder->forward(Tensor::zeros({3, 5, 8})),
                    Catch::Contains("TransformerEncoder") && Catch::Contains("f32[3,5,8]"));
  CHECK_THROWS_WITH(encoder->forward(Tensor::zeros({3, 5, 16}), Tensor::zeros({3, 4}, DType::boolean)),
                    Catch::Contains("key_padding_mask") && Catch::Contains("bool[3,4]"));
  CHECK_THROWS_AS(encoder->forward(Tensor::zeros({3, 5, 16}), Tensor::zeros({3, 5})), ShapeError);
  std::map<std::string, Tensor> state = encoder->state_dict();
  state["layers.0.linear1.weight"] = Tensor::zeros({32, 8});
  CHECK_THROWS_AS(encoder->load(state), ShapeError);
}
