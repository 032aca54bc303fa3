#pragma once
// The model of the two-rank examples (graph_ranks, chaos_soak): an MLP placed on `model_rank`,
// its weights drawn from fixed seeds, so that every rank, and the one-process run that checks the
// answers, builds the same graph.
//
//   Port normed = g.op("layer_norm", {x}, {{"normalized_shape", Shape{256}}}, "normalise");
//   Port z = split_mlp_logits(g, normed, /*model_rank=*/1, /*features=*/256, /*hidden=*/512);  // [rows, 10]
//   Tensor x = seeded_normal({32, 256}, /*seed=*/100);
#include <cstdint>

#include "dataflow/graph.h"
#include "devices/random.h"

namespace troupe {

// N(0, 0.1) values from a generator of their own: the same for a seed in any process.
inline Tensor seeded_normal(const Shape& shape, uint64_t seed) {
  Generator generator(seed);
  return rand_normal(shape, 0.0, 0.1, DType::f32, generator);
}

// fc1 (features -> hidden), gelu, fc2 (hidden -> 10 logits), all on model_rank.
inline Port split_mlp_logits(Graph& g, Port normed, int model_rank, int64_t features, int64_t hidden) {
  Port w1 = g.constant("w1", seeded_normal({hidden, features}, 1));
  Port h = g.op("linear", {normed, w1}, {}, "fc1").on_rank(model_rank);
  Port a = g.op("gelu", {h}, {}, "act").on_rank(model_rank);
  return g.op("linear", {a, g.constant("w2", seeded_normal({10, hidden}, 2))}, {}, "fc2").on_rank(model_rank);
}

}  // namespace troupe
