#pragma once
// What the LSTM ensemble examples share (lstm_ensemble, graph_lstm, remote_ensemble): the
// tutorial's sizes as options, its input (torch.rand: uniform in [0, 1)) and the comparison of
// two results, so the three take the same flags and draw the same x.
//
//   LstmOptions o{.C = 1024};                  // the example's default hidden size
//   cli::App app{"..."};
//   add_lstm_options(app, o);                  // --models --T --B --C --reps --json
//   TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
//   const Tensor x = lstm_input(o, /*seed=*/1);
//   const double diff = max_abs_diff(a, b);
#include <cstdint>

#include "devices/ops.h"
#include "devices/random.h"
#include "devices/tensor.h"

#include "examples/command_line.h"

namespace troupe {

struct LstmOptions {
  int models = 4;  // ensemble members
  int64_t T = 50, B = 50, C = 256;
  int reps = 3;  // timed runs per variant
  bool json = false;
};

inline void add_lstm_options(cli::App& app, LstmOptions& o) {
  app.add_option("--models", o.models, "ensemble members")->check(cli::PositiveNumber);
  app.add_option("--T", o.T, "time steps")->check(cli::PositiveNumber);
  app.add_option("--B", o.B, "batch")->check(cli::PositiveNumber);
  app.add_option("--C", o.C, "input and hidden size")->check(cli::PositiveNumber);
  app.add_option("--reps", o.reps, "timed runs per variant (median reported)")->check(cli::PositiveNumber);
  app.add_flag("--json", o.json, "print one JSON line of figures");
}

// x of shape [T, B, C], the same for a seed on every rank and in every example.
inline Tensor lstm_input(const LstmOptions& o, uint64_t seed) {
  Generator generator(seed);
  return rand_uniform({o.T, o.B, o.C}, 0.0, 1.0, DType::f32, generator);
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) { return max(abs(sub(a, b))).item<float>(); }

}  // namespace troupe
