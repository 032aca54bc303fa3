// The LSTM ensemble of PyTorch's tutorial "Dynamic Parallelism in TorchScript", its members spread
// over the ranks as remote actors: member i lives on rank i % world size, rank 0 sends every member
// the input, waits for the answers and sums them. Checks the sum against the single-process serial
// ensemble (the same weights: member i is drawn from seed i, as LSTMEnsemble draws it).
//
//   build/bin/troupe launch --nproc 2 -- build/bin/remote_ensemble [--models 4] [--C 1024] [--json]
#include <cstdio>
#include <vector>

#include "devices/determinism.h"
#include "devices/ops.h"
#include "examples/command_line.h"
#include "examples/json_line.h"
#include "examples/lstm_example.h"
#include "examples/median_time.h"
#include "examples/run_example.h"
#include "models/lstm.h"
#include "net/remote/remote_actor.h"

using namespace troupe;
using namespace troupe::net;

namespace {

// One ensemble member: a bidirectional LSTM that answers forward(x) on whichever rank hosts it.
class Member {
 public:
  Member(int64_t input_size, int64_t hidden_size, int64_t seed) : lstm_(input_size, hidden_size, static_cast<uint64_t>(seed)) {}
  Tensor forward(const Tensor& x) { return lstm_(x); }

 private:
  models::BidirectionalLSTM lstm_;
};
TROUPE_ACTOR(Member(int64_t, int64_t, int64_t), "ensemble.member", &Member::forward);

}  // namespace

int main(int argc, char** argv) {
  // Every rank picks the same GEMM as the one-process reference does: chosen by timing, a busy
  // machine could pick another on one rank, and the answers would differ in the last bits.
  set_deterministic_kernels(true);
  cli::App app{"The TorchScript tutorial's LSTM ensemble with its members on remote actors across the ranks"};
  LstmOptions o{.C = 1024};
  add_lstm_options(app, o);
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
  const auto [models, T, B, C, reps, json] = o;

  return run_example("remote_ensemble", [&] {
    auto world = init_process_group();
    RemoteActors actors(world);
    if (world->rank() != 0) {
      serve();
      return 0;
    }
    std::vector<RemoteActor> members;
    for (int i = 0; i < models; ++i) members.push_back(spawn_on(i % world->size(), "ensemble.member", C, C, int64_t{i}));
    const Tensor x = lstm_input(o, 1);

    // Every member's request goes out before any answer is awaited; the answers are summed in
    // member order, as the serial ensemble sums them.
    auto remote = [&] {
      std::vector<Future<Tensor>> outputs;
      for (const RemoteActor& m : members) outputs.push_back(m.request<Tensor>("forward", x));
      Tensor total = outputs[0].get();
      for (size_t i = 1; i < outputs.size(); ++i) total = add(total, outputs[i].get());
      return total;
    };
    models::LSTMEnsemble local(models, C, C, /*seed=*/0);
    const Tensor expected = local.serial(x), got = remote();
    const double diff = max_abs_diff(expected, got);
    const double serial_s = median_seconds([&] { local.serial(x); }, reps);
    const double remote_s = median_seconds([&] { remote(); }, reps);
    if (json) {
      print_json_line(nlohmann::ordered_json{{"models", models},
                                             {"ranks", world->size()},
                                             {"C", C},
                                             {"serial_one_process_s", rounded(serial_s, 4)},
                                             {"remote_s", rounded(remote_s, 4)},
                                             {"max_abs_diff", significant(diff, 3)}});
    } else {
      std::printf("LSTM ensemble, %d bidirectional members over %d ranks (T=%lld B=%lld C=%lld)\n", models,
                  world->size(), static_cast<long long>(T), static_cast<long long>(B), static_cast<long long>(C));
      std::printf("  serial, one process   %.3f s\n  members on the ranks  %.3f s\n  max |diff| %.3g\n", serial_s,
                  remote_s, diff);
    }
    return diff <= 1e-5 ? 0 : 1;
  });
}
