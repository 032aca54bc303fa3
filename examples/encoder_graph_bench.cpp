// A transformer encoder as a dataflow graph, launched node by node and replayed as one CUDA graph:
// the figure behind `Executor(g, {.cuda_graph = true})`. At batch 1 each layer's kernels are small,
// so launching them (an actor call and a kernel launch per node) costs more than running them; a
// replay launches the whole invocation at once.
//
//   encoder_graph_bench --device cuda --json                  # 24 layers, d 1024, 16 heads, 32 tokens
//   encoder_graph_bench --device cpu --layers 2 --d-model 64  # the graph on host kernels (no replay)
//
// Each layer is the fastpath's post-norm layer over one packed sequence, ten op nodes:
// linear(qkv) -> packed_attention -> linear(out) -> add -> layer_norm -> linear -> relu -> linear ->
// add -> layer_norm. Three ways, each checked against the first: `eager` (the ops called from this
// thread), `launched` (an Executor, each node an actor owning a lane), `replayed` (the same graph
// with cuda_graph; the first invocation captures). Times are medians of whole invocations, input
// queued to output read back on the host.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "actors/runtime.h"
#include "dataflow/executor.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "examples/command_line.h"
#include "examples/device_option.h"
#include "examples/json_line.h"
#include "examples/median_time.h"
#include "examples/run_example.h"

using namespace troupe;

namespace {

struct EncoderShape {
  int64_t layers, d_model, heads, feedforward, tokens;
};

struct LayerWeights {
  Tensor qkv_w, qkv_b, out_w, out_b, norm1_w, norm1_b, ff1_w, ff1_b, ff2_w, ff2_b, norm2_w, norm2_b;
};

LayerWeights random_layer(const EncoderShape& s, Generator& gen, Device device) {
  const double a = 1.0 / std::sqrt(static_cast<double>(s.d_model));
  const double f = 1.0 / std::sqrt(static_cast<double>(s.feedforward));
  auto u = [&](Shape shape, double bound) { return rand_uniform(shape, -bound, bound, DType::f32, gen).to(device); };
  return {u({3 * s.d_model, s.d_model}, a), u({3 * s.d_model}, a),   u({s.d_model, s.d_model}, a),
          u({s.d_model}, a),                Tensor::ones({s.d_model}).to(device), Tensor::zeros({s.d_model}).to(device),
          u({s.feedforward, s.d_model}, a), u({s.feedforward}, a),  u({s.d_model, s.feedforward}, f),
          u({s.d_model}, f),                Tensor::ones({s.d_model}).to(device), Tensor::zeros({s.d_model}).to(device)};
}

Tensor eager_layer(const Tensor& x, const LayerWeights& w, const Tensor& offsets, const EncoderShape& s) {
  const Shape norm{s.d_model};
  const Tensor context = packed_attention(linear(x, w.qkv_w, w.qkv_b), offsets, s.heads);
  const Tensor h = layer_norm(add(x, linear(context, w.out_w, w.out_b)), norm, w.norm1_w, w.norm1_b);
  const Tensor ff = linear(relu(linear(h, w.ff1_w, w.ff1_b)), w.ff2_w, w.ff2_b);
  return layer_norm(add(h, ff), norm, w.norm2_w, w.norm2_b);
}

Graph encoder_graph(const std::vector<LayerWeights>& layers, const Tensor& offsets, const EncoderShape& s, Device device) {
  Graph g("encoder");
  Port x = g.input("x", TensorMeta{DType::f32, {s.tokens, s.d_model}, device});
  const Port starts = g.constant("offsets", offsets);
  const Attrs norm{{"normalized_shape", std::vector<int64_t>{s.d_model}}, {"eps", 1e-5}};
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerWeights& w = layers[i];
    const std::string l = "layer" + std::to_string(i) + ".";
    auto constant = [&](const char* name, const Tensor& t) { return g.constant(l + name, t); };
    auto op = [&](const char* name, const char* op_name, std::vector<Port> in, Attrs attrs = {}) {
      return g.op(op_name, std::move(in), std::move(attrs)).named(l + name).on(device);
    };
    const Port qkv = op("qkv", "linear", {x, constant("qkv_w", w.qkv_w), constant("qkv_b", w.qkv_b)});
    const Port context = op("attention", "packed_attention", {qkv, starts}, {{"heads", s.heads}});
    const Port attended = op("out", "linear", {context, constant("out_w", w.out_w), constant("out_b", w.out_b)});
    const Port h = op("norm1", "layer_norm",
                      {op("residual1", "add", {x, attended}), constant("norm1_w", w.norm1_w), constant("norm1_b", w.norm1_b)},
                      norm);
    const Port hidden = op("relu", "relu", {op("ff1", "linear", {h, constant("ff1_w", w.ff1_w), constant("ff1_b", w.ff1_b)})});
    const Port ff = op("ff2", "linear", {hidden, constant("ff2_w", w.ff2_w), constant("ff2_b", w.ff2_b)});
    x = op("norm2", "layer_norm",
           {op("residual2", "add", {h, ff}), constant("norm2_w", w.norm2_w), constant("norm2_b", w.norm2_b)}, norm);
  }
  g.output("y", x);
  return g;
}

double max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  return run_example("encoder_graph_bench", [&] {
    cli::App app("A transformer encoder graph: launched node by node, and replayed as one CUDA graph");
    EncoderShape s{24, 1024, 16, 4096, 32};
    std::string device_name = "cpu";
    int reps = 20;
    bool json = false;
    app.add_option("--layers", s.layers, "encoder layers")->check(cli::PositiveNumber)->capture_default_str();
    app.add_option("--d-model", s.d_model, "model width")->check(cli::PositiveNumber)->capture_default_str();
    app.add_option("--heads", s.heads, "attention heads")->check(cli::PositiveNumber)->capture_default_str();
    app.add_option("--feedforward", s.feedforward, "feed-forward width")->check(cli::PositiveNumber)->capture_default_str();
    app.add_option("--tokens", s.tokens, "tokens of the one sequence (batch 1)")->check(cli::PositiveNumber)->capture_default_str();
    app.add_option("--reps", reps, "timed invocations per way (median)")->check(cli::PositiveNumber)->capture_default_str();
    add_device_option(app, device_name);
    app.add_flag("--json", json, "print one JSON line of figures");
    TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
    if (s.d_model % s.heads != 0)
      throw ValueError("encoder_graph_bench: --d-model " + std::to_string(s.d_model) + " is not a multiple of --heads " +
                       std::to_string(s.heads));
    const Device device = example_device(device_name);
    Runtime runtime;

    Generator gen(20261126);
    std::vector<LayerWeights> layers;
    for (int64_t i = 0; i < s.layers; ++i) layers.push_back(random_layer(s, gen, device));
    const Tensor offsets = Tensor::from_vector<int64_t>({0, s.tokens}, {2}).to(device);
    const Tensor x = rand_uniform({s.tokens, s.d_model}, -1, 1, DType::f32, gen).to(device);

    auto eager = [&] {
      Tensor h = x;
      for (const auto& w : layers) h = eager_layer(h, w, offsets, s);
      return h.to_vector<float>();  // the host reads the values: the one sync of an invocation
    };
    const std::vector<float> want = eager();
    const double eager_s = median_seconds(eager, reps, 2);

    const Graph graph = encoder_graph(layers, offsets, s, device);
    auto invoke = [&](Executor& exec) { return exec({{"x", x}}).at("y").tensor().to_vector<float>(); };
    Executor launched(graph);
    const double launched_error = max_abs_difference(invoke(launched), want);
    const double launched_s = median_seconds([&] { invoke(launched); }, reps, 2);

    std::optional<double> replayed_s, replayed_error;
    if (!device.is_cpu()) {
      Executor replayed(graph, {.cuda_graph = true});
      replayed_error = max_abs_difference(invoke(replayed), want);  // the capture
      replayed_s = median_seconds([&] { invoke(replayed); }, reps, 2);
    }
    const double tolerance = 1e-3;
    if (launched_error > tolerance || replayed_error.value_or(0) > tolerance)
      throw ValueError("encoder_graph_bench: the graph's output differs from the eager ops' by " +
                       std::to_string(std::max(launched_error, replayed_error.value_or(0))));

    const int64_t nodes = 10 * s.layers;
    if (json) {
      nlohmann::ordered_json line{{"device", device.str()},
                                  {"layers", s.layers},
                                  {"d_model", s.d_model},
                                  {"tokens", s.tokens},
                                  {"nodes", nodes},
                                  {"eager_ms", significant(eager_s * 1e3, 4)},
                                  {"launched_ms", significant(launched_s * 1e3, 4)},
                                  {"replayed_ms", nullptr},
                                  {"replay_speedup", nullptr},
                                  {"max_abs_error", significant(std::max(launched_error, replayed_error.value_or(0)), 2)}};
      if (replayed_s) {
        line["replayed_ms"] = significant(*replayed_s * 1e3, 4);
        line["replay_speedup"] = rounded(launched_s / *replayed_s, 2);
      }
      print_json_line(line);
    } else {
      std::printf("encoder graph on %s: %lld layers (%lld nodes), d_model %lld, %lld tokens, batch 1\n",
                  device.str().c_str(), static_cast<long long>(s.layers), static_cast<long long>(nodes),
                  static_cast<long long>(s.d_model), static_cast<long long>(s.tokens));
      std::printf("  eager ops:         %8.3f ms\n", eager_s * 1e3);
      std::printf("  graph launched:    %8.3f ms\n", launched_s * 1e3);
      if (replayed_s)
        std::printf("  graph replayed:    %8.3f ms  (%.2fx faster than launched)\n", *replayed_s * 1e3,
                    launched_s / *replayed_s);
      else
        std::printf("  graph replayed:    (CUDA graphs need --device cuda)\n");
    }
    return 0;
  });
}
