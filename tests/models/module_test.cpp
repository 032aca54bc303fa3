// models/nn/module.h: the one Module base. Buffers beside parameters, load's errors, to(Device),
// train/eval through nested sub-modules, the XLMR state from its registered sub-modules, and
// seeded constructors that leave the thread's generator alone.
#include <catch2/catch.hpp>

#include <filesystem>

#include "devices/backend.h"
#include "devices/io/safetensors.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "models/lstm.h"
#include "models/nn/layers.h"
#include "models/xlmr/checkpoint.h"
#include "models/xlmr/xlmr.h"

using namespace troupe;
using namespace troupe::models;

namespace {

// A parameter, an integer buffer (like Hugging Face's position_ids) and a sub-module.
class Positioned : public Module {
 public:
  Positioned() {
    register_parameter("scale", scale);
    register_buffer("position_ids", position_ids);
    register_module("proj", proj);
  }
  Tensor scale = rand_uniform({3}, -1, 1);
  Tensor position_ids = Tensor::arange(5, DType::i64).reshape({1, 5});
  Linear proj{3, 2};
};

// Two levels of nesting, to see train/eval and names reach the bottom.
class Outer : public Module {
 public:
  Outer() {
    register_module("inner", inner);
    register_module("drop", drop);
  }
  Positioned inner;
  Dropout drop;
};

std::vector<std::string> names_of(const Module::NamedTensors& named) {
  std::vector<std::string> out;
  for (const auto& [name, t] : named) out.push_back(name);
  return out;
}

}  // namespace

TEST_CASE("Module: buffers are state (state_dict, load, save) but not parameters") {
  manual_seed(11);
  Outer a;
  CHECK(names_of(a.named_parameters()) == std::vector<std::string>{"inner.scale", "inner.proj.weight", "inner.proj.bias"});
  CHECK(names_of(a.named_buffers()) == std::vector<std::string>{"inner.position_ids"});
  CHECK(a.parameters().size() == 3);
  CHECK_FALSE(a.inner.position_ids.requires_grad());
  auto state = a.state_dict();
  CHECK(state.size() == 4);
  CHECK(state.at("inner.position_ids").to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});

  Outer b;
  b.inner.position_ids.mutable_data<int64_t>()[0] = 42;
  b.load(state);
  CHECK(b.inner.position_ids.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(b.inner.scale.to_vector<float>() == a.inner.scale.to_vector<float>());
  CHECK(b.inner.scale.requires_grad());  // loading writes values into the same leaf

  const auto path = (std::filesystem::temp_directory_path() / "troupe_module_test.safetensors").string();
  a.inner.position_ids.mutable_data<int64_t>()[4] = 7;
  a.save(path);
  CHECK(read_safetensors(path).at("inner.position_ids").dtype() == DType::i64);
  b.load(path);
  std::filesystem::remove(path);
  CHECK(b.inner.position_ids.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 7});
}

TEST_CASE("Module: load names missing and unexpected keys and wrong shapes, converts dtypes, changes nothing on an error") {
  manual_seed(12);
  Outer m;
  const auto before = m.inner.scale.to_vector<float>();
  auto state = m.state_dict();
  state.erase("inner.position_ids");
  state["inner.extra"] = Tensor::zeros({1});
  CHECK_THROWS_AS(m.load(state), ValueError);
  CHECK_THROWS_WITH(m.load(state), Catch::Contains("missing: inner.position_ids") &&
                                       Catch::Contains("unexpected: inner.extra"));
  state = m.state_dict();
  state["inner.scale"] = Tensor::zeros({3});
  state["inner.position_ids"] = Tensor::zeros({1, 6}, DType::i64);
  CHECK_THROWS_AS(m.load(state), ShapeError);
  CHECK_THROWS_WITH(m.load(state), Catch::Contains("inner.position_ids") && Catch::Contains("i64[1,6]"));
  CHECK(m.inner.scale.to_vector<float>() == before);  // shapes are checked before anything is copied

  state = m.state_dict();
  state["inner.scale"] = Tensor::from_vector<double>({0.5, -0.25, 2}, {3});
  m.load(state);
  CHECK(m.inner.scale.dtype() == DType::f32);
  CHECK(m.inner.scale.to_vector<float>() == std::vector<float>{0.5f, -0.25f, 2.0f});
}

TEST_CASE("Module: to(Device) moves parameters and buffers in place, an unreachable device is a DeviceError") {
  manual_seed(13);
  Outer m;
  Tensor* scale = m.parameters()[0];
  sum(m.inner.scale).backward();
  const auto values = m.inner.scale.to_vector<float>();
  m.to(Device::cpu());
  CHECK(m.parameters()[0] == scale);  // an optimizer's pointers stay valid
  CHECK(m.inner.scale.to_vector<float>() == values);
  CHECK(m.inner.scale.requires_grad());
  CHECK(m.inner.scale.grad().defined());
  CHECK(m.inner.position_ids.device() == Device::cpu());

  if (!has_backend(DeviceType::cuda)) {
    CHECK_THROWS_AS(m.to(Device::cuda()), DeviceError);
    CHECK_THROWS_WITH(m.to(Device::cuda()), Catch::Contains("cuda:0") && Catch::Contains("inner.scale"));
    for (auto& [name, t] : m.state_dict()) CHECK(t.device() == Device::cpu());  // nothing moved
    return;
  }
  m.to(Device::cuda());
  for (auto& [name, t] : m.state_dict()) CHECK(t.device() == Device::cuda());
  CHECK(m.inner.scale.requires_grad());
  CHECK(m.inner.scale.grad().device() == Device::cuda());
  auto state = m.state_dict();
  m.load(state);  // host or device values into device tensors
  m.to(Device::cpu());
  CHECK(m.inner.scale.to_vector<float>() == values);
  CHECK(m.inner.position_ids.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
}

TEST_CASE("Module: train and eval reach every sub-module, however deep") {
  Outer m;
  m.eval();
  CHECK_FALSE(m.is_training());
  CHECK_FALSE(m.drop.is_training());
  CHECK_FALSE(m.inner.proj.is_training());
  m.train();
  CHECK(m.inner.proj.is_training());

  XLMR model(XLMRConfig::tiny(20, 2));
  model.eval();
  CHECK_FALSE(model.embeddings.is_training());
  CHECK_FALSE(model.encoder.layers[1]->dropout2.is_training());
  CHECK_FALSE(model.head.dropout.is_training());
  model.train();
  CHECK(model.embeddings.is_training());
  CHECK(model.encoder.layers[0]->self_attn.is_training());
}

TEST_CASE("sub_state: one sub-module's part of a checkpoint") {
  const std::map<std::string, Tensor> state{{"a.x", Tensor::zeros({1})}, {"a.y.z", Tensor::ones({2})},
                                            {"ab.x", Tensor::zeros({3})}, {"b", Tensor::zeros({4})}};
  auto a = sub_state(state, "a.");
  REQUIRE(a.size() == 2);
  CHECK(a.at("y.z").shape() == Shape{2});
  CHECK(a.count("x") == 1);
  CHECK(sub_state(state, "c.").empty());
  CHECK(sub_state(state, "").size() == 4);
}

TEST_CASE("XLMR: the state comes from its registered sub-modules under torchtext's names") {
  const XLMRConfig config = XLMRConfig::tiny(30, 2);
  XLMR a(config, 1);
  auto state = a.state_dict();
  const auto shapes = xlmr_weight_shapes(config, XLMRNaming::torchtext);
  REQUIRE(state.size() == shapes.size());
  for (const auto& [name, shape] : shapes) {
    INFO(name);
    REQUIRE(state.count(name) == 1);
    CHECK(state.at(name).shape() == shape);
  }
  CHECK(a.parameter_count() == [&] {
    int64_t n = 0;
    for (const auto& [name, shape] : shapes) n += numel(shape);
    return n;
  }());

  // Through a file and back: the same model.
  const auto path = (std::filesystem::temp_directory_path() / "troupe_module_test_xlmr.safetensors").string();
  a.save(path);
  XLMR b(config, 2);
  const Tensor tokens = Tensor::from_vector<int64_t>({0, 5, 9, 2, 0, 7, 2, 1}, {2, 4});
  a.eval();
  b.eval();
  // Each model once per version of its weights: a weight's second use goes through its packed
  // form (devices/cpu/matmul.cpp), which rounds differently.
  const auto expected = a(tokens).to_vector<float>();
  CHECK(b(tokens).to_vector<float>() != expected);
  b.load(path);
  std::filesystem::remove(path);
  CHECK(b(tokens).to_vector<float>() == expected);
}

TEST_CASE("Seeded constructors draw from their own Generator: the thread's stream is untouched") {
  const XLMRConfig config = XLMRConfig::tiny(30, 2);
  manual_seed(21);
  const auto expected = rand_uniform({8}, 0, 1).to_vector<float>();
  manual_seed(21);
  XLMR model(config, 3);
  models::LSTM lstm(4, 4, 3);
  XLMRobertaEmbeddings emb(10, 4, 12, 1, 1e-5, 0.1, 3);
  CHECK(rand_uniform({8}, 0, 1).to_vector<float>() == expected);

  // The same seed makes the same model, whatever the thread's generator did in between.
  manual_seed(99);
  XLMR again(config, 3);
  for (const auto& [name, t] : model.state_dict()) {
    INFO(name);
    CHECK(again.state_dict().at(name).to_vector<float>() == t.to_vector<float>());
  }
}
