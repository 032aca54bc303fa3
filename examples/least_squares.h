#pragma once
// The workload of the in-place elastic examples written with actors and with a graph
// (quorum_actors, quorum_graph): least squares on a dataset every rank makes from one seed, so the
// result is the same whatever the world, and the settings their command lines share.
//
//   LeastSquaresSettings o;
//   add_least_squares_options(app, o);
//   LeastSquares data;                              // the same on every rank
//   Tensor g = data.gradient(w, 0, kLeastSquaresRows);   // summed over those rows; divide by the rows
#include <cstdint>

#include "devices/ops.h"
#include "devices/random.h"
#include "examples/command_line.h"

namespace troupe {

inline constexpr int64_t kLeastSquaresRows = 16384, kLeastSquaresFeatures = 32;

// y = x w* + noise.
struct LeastSquares {
  Tensor x, y;
  LeastSquares() {
    Generator generator(7);
    x = rand_uniform({kLeastSquaresRows, kLeastSquaresFeatures}, -1, 1, DType::f32, generator);
    const Tensor truth = rand_uniform({kLeastSquaresFeatures, 1}, -1, 1, DType::f32, generator);
    y = add(matmul(x, truth), mul(rand_uniform({kLeastSquaresRows, 1}, -1, 1, DType::f32, generator), 0.01));
  }
  // The squared error's gradient at w, summed over rows [begin, end).
  Tensor gradient(const Tensor& w, int64_t begin, int64_t end) const {
    const Tensor rows = x.slice(0, begin, end), r = sub(matmul(rows, w), y.slice(0, begin, end));
    return mul(matmul(rows.transpose(0, 1), r), 2.0);
  }
  double loss(const Tensor& w) const {  // mean squared error over every row
    const Tensor r = sub(matmul(x, w), y);
    return sum(mul(r, r)).item<double>() / kLeastSquaresRows;
  }
};

struct LeastSquaresSettings {
  int64_t steps = 300;
  double lr = 0.5;
  int log_every = 50;
  int pause_ms = 0;
  bool json = false;
};

inline void add_least_squares_options(cli::App& app, LeastSquaresSettings& o) {
  app.add_option("--steps", o.steps, "training steps")->check(cli::PositiveNumber);
  app.add_option("--lr", o.lr, "learning rate")->check(cli::PositiveNumber);
  app.add_option("--log-every", o.log_every, "log the loss every this many steps")->check(cli::PositiveNumber);
  app.add_option("--pause-ms", o.pause_ms, "a pause after each step (paces a demo or a test)")->check(cli::NonNegativeNumber);
  app.add_flag("--json", o.json, "one JSON line of figures at the end (from the last driver)");
}

}  // namespace troupe
