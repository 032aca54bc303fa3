// The LSTM ensemble of PyTorch's tutorial "Dynamic Parallelism in TorchScript" served by an actor
// mesh (net/remote/mesh.h): one member per point of a [rank, member] mesh over the job's ranks,
// member i drawn from seed i as LSTMEnsemble draws it. Rank 0 serves a stream of batches: each
// batch is one mesh call, sent down a tree of the ranks and summed on the way back up
// (call_reduce), and is checked against the single-process serial ensemble.
//
//   build/bin/troupe launch --nproc 2 -- build/bin/mesh_serving [--models 4] [--batches 4] [--json]
//   {"models":4,"ranks":2,"C":256,"batches":4,"serial_one_process_s":..,"mesh_s":..,"requests_s":..,"max_abs_diff":..}
//
// mesh_s: a batch's median time through the mesh; requests_s: the same batch as one request per
// member, all in flight, summed here (remote_ensemble's way).
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
#include "net/remote/mesh.h"

using namespace troupe;
using namespace troupe::net;

namespace {

// One ensemble member: its seed is its index in the mesh.
class Member {
 public:
  Member(const MeshPoint& at, int64_t input_size, int64_t hidden_size)
      : lstm_(input_size, hidden_size, static_cast<uint64_t>(at.index)) {}
  Tensor forward(const Tensor& x) { return lstm_(x); }

 private:
  models::BidirectionalLSTM lstm_;
};
TROUPE_ACTOR(Member(const MeshPoint&, int64_t, int64_t), "serving.member", &Member::forward);

}  // namespace

int main(int argc, char** argv) {
  set_deterministic_kernels(true);  // every rank picks the GEMM the one-process reference picks
  cli::App app{"An LSTM ensemble served by an actor mesh over the ranks"};
  LstmOptions o;
  int batches = 4;
  add_lstm_options(app, o);
  app.add_option("--batches", batches, "batches served and checked")->check(cli::PositiveNumber);
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
  const auto [models, T, B, C, reps, json] = o;

  return run_example("mesh_serving", [&] {
    auto world = init_process_group();
    RemoteActors actors(world);
    if (world->rank() != 0) {
      serve();
      return 0;
    }
    const int ranks = world->size();
    if (models % ranks != 0)
      throw ValueError("mesh_serving: --models " + std::to_string(models) + " must be a multiple of the " +
                       std::to_string(ranks) + " ranks (a [rank, member] mesh)");
    Mesh ensemble = spawn_mesh("serving.member", {{"rank", ranks}, {"member", models / ranks}}, C, C);
    models::LSTMEnsemble local(models, C, C, /*seed=*/0);

    double diff = 0;
    for (int b = 0; b < batches; ++b) {
      const Tensor x = lstm_input(o, static_cast<uint64_t>(b + 1));
      diff = std::max(diff, max_abs_diff(local.serial(x), wait(ensemble.call_reduce(ReduceOp::sum, "forward", x))));
    }
    const Tensor x = lstm_input(o, 1);
    const std::vector<RemoteActor> members = ensemble.members();
    auto requests = [&] {
      std::vector<Future<Tensor>> outputs;
      for (const RemoteActor& m : members) outputs.push_back(m.request<Tensor>("forward", x));
      Tensor total = outputs[0].get();
      for (size_t i = 1; i < outputs.size(); ++i) total = add(total, outputs[i].get());
      return total;
    };
    const double serial_s = median_seconds([&] { local.serial(x); }, reps);
    const double mesh_s = median_seconds([&] { wait(ensemble.call_reduce(ReduceOp::sum, "forward", x)); }, reps);
    const double requests_s = median_seconds(requests, reps);
    ensemble.stop();
    if (json) {
      print_json_line(nlohmann::ordered_json{{"models", models}, {"ranks", ranks}, {"C", C}, {"batches", batches},
                                             {"serial_one_process_s", rounded(serial_s, 4)},
                                             {"mesh_s", rounded(mesh_s, 4)}, {"requests_s", rounded(requests_s, 4)},
                                             {"max_abs_diff", significant(diff, 3)}});
    } else {
      std::printf("LSTM ensemble, %d members as a [rank=%d, member=%d] mesh (T=%lld B=%lld C=%lld), %d batches checked\n",
                  models, ranks, models / ranks, static_cast<long long>(T), static_cast<long long>(B),
                  static_cast<long long>(C), batches);
      std::printf("  serial, one process         %.3f s\n  mesh call_reduce(sum)       %.3f s\n"
                  "  one request per member      %.3f s\n  max |diff| %.3g\n",
                  serial_s, mesh_s, requests_s, diff);
    }
    return diff <= 1e-4 ? 0 : 1;  // the tree sums in another order than the serial ensemble
  });
}
