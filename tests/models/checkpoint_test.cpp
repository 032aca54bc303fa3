// Checkpoints (models/train/checkpoint.h): a restored run goes on bit for bit; truncated, corrupt
// and foreign checkpoints are clear errors that change nothing; the directory keeps the last saves
// and survives a crash in the middle of one. The optimizers' state_dict, the generator's state and
// the loader's resumable position they rely on. The kill-and-restart run of dist_sgd is in
// restart_test.cpp.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <cstring>
#include <fstream>

#include "devices/error.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "models/data/fashion_mnist.h"
#include "models/data/loader.h"
#include "models/nn/net.h"
#include "models/nn/optimizer.h"
#include "models/train/checkpoint.h"
#include "models/train/wide_net.h"

using namespace troupe;
using namespace troupe::models;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("troupe_checkpoint_test_" + std::to_string(::getpid()));
  TempDir() { fs::remove_all(path); }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

const Dataset& images() {
  static Dataset d = [] {
    Dataset t = load_fashion_mnist(kFashionMnistDir, "t10k");
    return Dataset{t.images.slice(0, 0, 256).contiguous(), t.labels.slice(0, 0, 256).contiguous()};
  }();
  return d;
}

// One SGD step of the Net (dropout on) on the i-th batch of 32.
void train_step(Net& net, Optimizer& optimizer, int i) {
  const Dataset& d = images();
  optimizer.zero_grad();
  nll_loss(net(d.images.slice(0, 32 * i, 32 * i + 32)), d.labels.slice(0, 32 * i, 32 * i + 32)).backward();
  optimizer.step();
}

std::vector<Tensor> snapshot(Module& m) {
  std::vector<Tensor> out;
  for (Tensor* p : m.parameters()) out.push_back(p->detach().clone());
  return out;
}

bool same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].nbytes() != b[i].nbytes() || std::memcmp(a[i].raw_data(), b[i].raw_data(), a[i].nbytes()) != 0) return false;
  return true;
}

void overwrite_byte(const std::string& path, size_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

}  // namespace

TEST_CASE("checkpoint: a restored model, optimizer and generator train on bit for bit", "[checkpoint]") {
  TempDir tmp;
  manual_seed(7);
  Net a;
  SGD sgd_a(a.parameters(), {.lr = 0.05, .momentum = 0.9, .nesterov = true});
  for (int i = 0; i < 3; ++i) train_step(a, sgd_a, i);
  CheckpointDir dir(tmp / "run", 2);
  dir.save(capture(3, a, sgd_a, {{"rng", to_json(thread_generator().state())}, {"note", "three steps"}}));
  for (int i = 3; i < 6; ++i) train_step(a, sgd_a, i);
  const std::vector<Tensor> expected = snapshot(a);

  manual_seed(99);  // other initial weights and another dropout stream, all replaced by the checkpoint
  Net b;
  SGD sgd_b(b.parameters(), {.lr = 0.05, .momentum = 0.9, .nesterov = true});
  train_step(b, sgd_b, 7);
  REQUIRE(dir.latest() == 3);
  Checkpoint c = dir.load(3);
  CHECK(c.state["note"] == "three steps");
  restore(c, b, sgd_b);
  thread_generator().set_state(generator_state_from_json(c.state["rng"]));
  for (int i = 3; i < 6; ++i) train_step(b, sgd_b, i);
  CHECK(same_bits(snapshot(b), expected));

  // Without the momentum buffers the trajectory differs: the optimizer's state matters.
  std::map<std::string, Tensor> model_state;
  for (auto& [name, t] : c.tensors)
    if (name.rfind("model.", 0) == 0) model_state.emplace(name.substr(6), t);
  Net d;
  SGD fresh(d.parameters(), {.lr = 0.05, .momentum = 0.9, .nesterov = true});
  d.load(model_state);
  thread_generator().set_state(generator_state_from_json(c.state["rng"]));
  for (int i = 3; i < 6; ++i) train_step(d, fresh, i);
  CHECK_FALSE(same_bits(snapshot(d), expected));
}

TEST_CASE("checkpoint: truncated, corrupt and foreign checkpoints are errors that change nothing", "[checkpoint]") {
  TempDir tmp;
  manual_seed(1);
  Net net;
  SGD sgd(net.parameters(), {.lr = 0.1, .momentum = 0.5});
  train_step(net, sgd, 0);
  CheckpointDir dir(tmp / "net", 2);
  dir.save(capture(10, net, sgd));
  const std::string tensors = dir.path_of(10) + "/tensors.safetensors";
  const std::string state = dir.path_of(10) + "/state.json";
  const auto size = fs::file_size(tensors);

  SECTION("truncated") {
    fs::resize_file(tensors, size - 100);
    CHECK_THROWS_WITH(dir.load(10), Catch::Contains("tensors.safetensors") && Catch::Contains("truncated"));
  }
  SECTION("one byte changed") {
    overwrite_byte(tensors, size - 1);
    CHECK_THROWS_AS(dir.load(10), IOError);
    CHECK_THROWS_WITH(dir.load(10), Catch::Contains("content hash"));
  }
  SECTION("state.json cut short") {
    fs::resize_file(state, fs::file_size(state) / 2);
    CHECK_THROWS_AS(dir.load(10), IOError);
    CHECK_THROWS_WITH(dir.load(10), Catch::Contains("state.json") && Catch::Contains("unreadable"));
  }
  SECTION("no such step") { CHECK_THROWS_WITH(dir.load(11), Catch::Contains("step-11") && Catch::Contains("no such")); }

  SECTION("another model's checkpoint: neither the model nor the optimizer changes") {
    WideNet wide;
    SGD wide_sgd(wide.parameters(), {.lr = 0.1, .momentum = 0.5});
    const Dataset& d = images();
    wide_sgd.zero_grad();
    nll_loss(wide(d.images.slice(0, 0, 8)), d.labels.slice(0, 0, 8)).backward();
    wide_sgd.step();
    CheckpointDir other(tmp / "wide", 2);
    other.save(capture(5, wide, wide_sgd));

    const std::vector<Tensor> before = snapshot(net);
    const auto momentum_before = sgd.state_dict();
    CHECK_THROWS_AS(restore(other.load(5), net, sgd), ShapeError);  // WideNet's momentum has other shapes
    CHECK(same_bits(snapshot(net), before));
    // The optimizer's state fits (no momentum yet) but the model's names do not: the optimizer is put back.
    SGD no_momentum_yet(wide.parameters(), {.lr = 0.1, .momentum = 0.5});
    Checkpoint model_only = capture(6, wide, no_momentum_yet);
    Checkpoint c = dir.load(10);
    for (auto& [name, t] : c.tensors)
      if (name.rfind("optimizer.", 0) == 0) model_only.tensors[name] = t;
    CHECK_THROWS_AS(restore(model_only, net, sgd), ShapeError);
    CHECK(same_bits(snapshot(net), before));
    const auto momentum_after = sgd.state_dict();
    REQUIRE(momentum_after.size() == momentum_before.size());
    for (auto& [name, t] : momentum_before) CHECK(same_bits({t}, {momentum_after.at(name)}));
  }
  SECTION("entries that are neither model nor optimizer state") {
    Checkpoint c = dir.load(10);
    c.tensors.emplace("extra.weight", Tensor::zeros({2}));
    CHECK_THROWS_WITH(restore(c, net, sgd), Catch::Contains("extra.weight"));
  }
}

TEST_CASE("checkpoint: the directory keeps the last saves and outlives a crash in the middle of one", "[checkpoint]") {
  TempDir tmp;
  manual_seed(2);
  Net net;
  SGD sgd(net.parameters(), {.lr = 0.1});
  CheckpointDir dir(tmp / "keep", 2);
  CHECK(dir.steps().empty());
  CHECK_FALSE(dir.latest());
  // What a crash during a save leaves: a temporary directory, never a step-N.
  fs::create_directories(tmp.path / "keep" / ".step-40.1234.tmp");
  std::ofstream(tmp / "keep/.step-40.1234.tmp/tensors.safetensors") << "half";
  fs::create_directories(tmp.path / "keep" / "step-x");  // not a step: ignored
  CHECK(dir.steps().empty());
  for (int64_t step : {10, 20, 30}) dir.save(capture(step, net, sgd, {{"step", step}}));
  CHECK(dir.steps() == std::vector<int64_t>{20, 30});
  CHECK_FALSE(fs::exists(tmp.path / "keep" / ".step-40.1234.tmp"));
  // Saving a step again (a restarted run going over it) replaces it.
  dir.save(capture(30, net, sgd, {{"again", true}}));
  CHECK(dir.steps() == std::vector<int64_t>{20, 30});
  CHECK(dir.load(30).state["again"] == true);
  CHECK_THROWS_AS(CheckpointDir(tmp / "bad", 0), ValueError);
  CHECK_THROWS_AS(dir.save(capture(-1, net, sgd)), ValueError);
}

TEST_CASE("checkpoint: optimizer state_dict round trips and is checked", "[checkpoint]") {
  manual_seed(3);
  Net net;
  Adam adam(net.parameters(), {.lr = 1e-3, .amsgrad = true});
  train_step(net, adam, 0);
  train_step(net, adam, 1);
  const auto state = adam.state_dict();
  CHECK(state.at("0.step").item<int64_t>() == 2);
  CHECK(state.count("0.max_exp_avg_sq") == 1);
  Adam other(net.parameters(), {.lr = 1e-3, .amsgrad = true});
  other.load_state_dict(state);
  const auto again = other.state_dict();
  REQUIRE(again.size() == state.size());
  for (auto& [name, t] : state) CHECK(same_bits({t}, {again.at(name)}));

  auto without = state;
  without.erase("0.exp_avg");
  CHECK_THROWS_WITH(other.load_state_dict(without), Catch::Contains("parameter 0") && Catch::Contains("incomplete"));
  auto unknown = state;
  unknown.emplace("99.exp_avg", state.at("0.exp_avg"));
  CHECK_THROWS_WITH(other.load_state_dict(unknown), Catch::Contains("unexpected entry '99.exp_avg'"));
  auto wrong = state;
  wrong["1.exp_avg"] = state.at("0.exp_avg");
  CHECK_THROWS_AS(other.load_state_dict(wrong), ShapeError);
  SGD sgd(net.parameters(), {.lr = 0.1, .momentum = 0.9});
  CHECK_THROWS_WITH(sgd.load_state_dict(state), Catch::Contains("SGD.load_state_dict") && Catch::Contains("0.exp_avg"));
}

TEST_CASE("checkpoint: the generator's state and the loader's position resume their streams", "[checkpoint]") {
  Generator g(42);
  for (int i = 0; i < 5; ++i) g.next();
  const Generator::State saved = g.state();
  const uint64_t next = g.next();
  Generator h(0);
  h.set_state(generator_state_from_json(to_json(saved)));
  CHECK(h.next() == next);
  CHECK_THROWS_AS(h.set_state(Generator::State{}), ValueError);
  CHECK_THROWS_AS(generator_state_from_json(nlohmann::json::array({"1", "2"})), ValueError);
  CHECK_THROWS_AS(generator_state_from_json(nlohmann::json::array({"1", "2", "3", "xyz"})), ValueError);

  std::vector<int64_t> indices(100);
  for (int64_t i = 0; i < 100; ++i) indices[static_cast<size_t>(i)] = i;
  BatchLoader whole(images(), indices, 16, 5), resumed(images(), indices, 16, 5);
  whole.start_epoch(3);
  std::vector<Tensor> labels;
  while (auto b = whole.next()) labels.push_back(b->labels);
  REQUIRE(labels.size() == 7);
  resumed.start_epoch(3, 4);
  CHECK(resumed.position() == 4);
  for (size_t i = 4; i < 7; ++i) {
    auto b = resumed.next();
    REQUIRE(b);
    CHECK(same_bits({b->labels}, {labels[i]}));
  }
  CHECK_FALSE(resumed.next());
  CHECK(resumed.position() == 7);
  resumed.start_epoch(3, 7);  // a checkpoint taken after the epoch's last batch
  CHECK_FALSE(resumed.next());
  CHECK_THROWS_AS(resumed.start_epoch(3, 8), IndexError);
}
