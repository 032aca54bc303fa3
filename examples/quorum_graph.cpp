// Training written as a dataflow graph over ranks under an in-place elastic job (net/quorum.h):
// each epoch builds one graph over the epoch's group, a gradient node per rank (its share of one
// global batch) summed on rank 0, and the epoch's rank 0 drives it. Least squares on a dataset every
// rank makes from one seed, so the result is the same whatever the world: a loss or a join costs
// no step.
//
//   troupe launch --in-place --nproc 1 --nnodes 2:3 --rdzv-endpoint HOST:PORT -- quorum_graph --steps 300
//
// No rank is special. The driver is whichever rank is rank 0 of the current epoch. Every gradient
// node keeps the newest (step, weights) it was given, so every rank holds the state as of the step
// in flight; at each epoch's start the ranks exchange it (models/train/live_state.h) and the new
// driver goes on from the newest, redoing the step that was in flight when the old one was lost.
// The gradient nodes are pure, so a lost worker costs no invocation either: its node moves to a
// survivor within the epoch (the executor heals) and the step completes; the driver then hands over
// to the next epoch at a step boundary, as it does when a rank joins, by destroying its executor,
// which ends the workers' serve().
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "dataflow/executor.h"
#include "devices/ops.h"
#include "examples/command_line.h"
#include "examples/json_line.h"
#include "examples/least_squares.h"
#include "examples/run_example.h"
#include "models/train/live_state.h"
#include "net/quorum.h"
#include "net/remote/remote_actor.h"

using namespace troupe;

namespace {

// What this rank holds of the training: the weights at the start of `step` (-1: none yet), and
// whether the driver said the job is done. The gradient nodes placed here update it.
struct Newest {
  std::mutex mutex;
  int64_t step = -1;
  Tensor w;
  bool done = false;

  void saw(int64_t s, const Tensor& weights) {
    std::lock_guard lock(mutex);
    if (s > step) {
      step = s;
      w = weights.clone();
    }
  }
  models::Checkpoint capture() {
    std::lock_guard lock(mutex);
    models::Checkpoint c;
    c.step = step;
    c.tensors["w"] = w;
    return c;
  }
};


// One epoch's graph over `world` ranks: inputs the step (i64 [1]; the job's length means done) and
// the weights; node "gradientR" on rank R sums the squared error's gradient over its rows; their
// sum, on rank 0, is the output "gradient".
Graph training_graph(int world, const std::shared_ptr<const LeastSquares>& data, const std::shared_ptr<Newest>& newest,
                     int64_t steps) {
  Graph g("quorum_graph");
  Port step = g.input("step"), w = g.input("w");
  std::optional<Port> total;
  for (int r = 0; r < world; ++r) {
    const int64_t begin = kLeastSquaresRows * r / world, end = kLeastSquaresRows * (r + 1) / world;
    auto gradient = [data, newest, begin, end, steps](const Tensor& s, const Tensor& weights) {
      const int64_t at = s.item<int64_t>();
      if (at >= steps) {  // the driver's last call: every rank leaves once its serve() returns
        std::lock_guard lock(newest->mutex);
        newest->done = true;
        return Tensor::zeros({kLeastSquaresFeatures, 1});
      }
      newest->saw(at, weights);
      return data->gradient(weights, begin, end);
    };
    // Pure: the same inputs give the same gradient anywhere, and running it twice harms nothing.
    Port share = g.call("gradient" + std::to_string(r), gradient, {step, w}).on_rank(r).pure();
    total = total ? g.op("add", {*total, share}, {}, "sum" + std::to_string(r)) : share;
  }
  g.output("gradient", *total);
  return g;
}

struct Driven {
  int64_t steps_run = 0;
  int epochs_driven = 0;
};

// Rank 0 of the epoch: from the newest state, drives until the job is done or a new epoch is
// ready (a rank joined or was lost: hands over at this boundary). Returns whether the job is done.
bool drive(net::Quorum& quorum, Executor& exec, const LeastSquares& data, const LeastSquaresSettings& o, Newest& newest,
           const models::StateShare& share, Driven& driven) {
  int64_t step;
  Tensor w;
  {
    std::lock_guard lock(newest.mutex);
    step = std::max<int64_t>(newest.step, 0);
    w = newest.w.defined() ? newest.w : Tensor::zeros({kLeastSquaresFeatures, 1});
  }
  ++driven.epochs_driven;
  std::printf("quorum epoch %d: world %d, driven by this rank from step %lld%s\n", quorum.epoch(),
              quorum.group().size(), static_cast<long long>(step),
              share.donor >= 0 && share.received ? (" (state from rank " + std::to_string(share.donor) + ")").c_str() : "");
  std::fflush(stdout);
  auto step_tensor = [](int64_t s) { return Tensor::from_vector<int64_t>({s}, {1}); };
  while (step < o.steps) {
    if (quorum.reform_needed()) return false;
    newest.saw(step, w);  // this rank's own state, as the workers hold it
    const Tensor gradient = exec({{"step", step_tensor(step)}, {"w", w}}).at("gradient").tensor();
    w = sub(w, mul(gradient, o.lr / kLeastSquaresRows));
    ++step;
    ++driven.steps_run;
    newest.saw(step, w);  // a step done: should this rank be lost now, the others redo it
    if (step % o.log_every == 0 || step == o.steps) {
      std::printf("step %lld loss %.6f\n", static_cast<long long>(step), data.loss(w));
      std::fflush(stdout);
    }
    if (o.pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.pause_ms));
  }
  exec({{"step", step_tensor(o.steps)}, {"w", w}});  // done: every rank's node hears it
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  LeastSquaresSettings o;
  cli::App app{"Least squares trained by a dataflow graph over ranks in an in-place elastic job (troupe launch --in-place)"};
  add_least_squares_options(app, o);
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
  return run_example("quorum_graph", [&] {
    if (!net::Quorum::configured())
      throw ValueError("quorum_graph runs under troupe launch --in-place (TROUPE_QUORUM is not set)");
    auto data = std::make_shared<const LeastSquares>();
    auto newest = std::make_shared<Newest>();
    net::Quorum quorum;
    Driven driven;
    bool done = false;
    const auto start = std::chrono::steady_clock::now();
    while (!done) {
      try {
        net::ProcessGroup& group = quorum.group();
        // The newest state any rank holds, to every rank behind it (the epoch's driver included).
        const models::StateShare share =
            models::share_newest_state(group, newest->capture().step, [&] { return newest->capture(); });
        if (share.received) newest->saw(share.received->step, share.received->tensors.at("w"));
        net::RemoteActors actors(quorum.shared_group());  // the epoch's, outliving its executor
        Executor exec(training_graph(group.size(), data, newest, o.steps), {.max_in_flight = 1, .group = quorum.shared_group()});
        if (group.rank() == 0)
          done = drive(quorum, exec, *data, o, *newest, share, driven);
        else
          exec.serve();  // until the driver finishes, hands over, or is lost
        std::lock_guard lock(newest->mutex);
        done = done || newest->done;
      } catch (const CommError& e) {  // PeerLostError or the group broken under a call
        quorum.lost(e);
      }
      if (!done) quorum.reform();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (driven.epochs_driven > 0 && newest->step == o.steps) {
      const double loss = data->loss(newest->w);
      std::printf("done: %lld steps, loss %.6f, %d epochs, %lld steps run here, %.2f s\n",
                  static_cast<long long>(newest->step), loss, quorum.epoch() + 1,
                  static_cast<long long>(driven.steps_run), seconds);
      if (o.json)
        print_json_line(nlohmann::ordered_json{{"steps", newest->step},
                                               {"loss", loss},
                                               {"quorum_epochs", quorum.epoch() + 1},
                                               {"steps_run_here", driven.steps_run},
                                               {"seconds", seconds}});
    }
    quorum.leave();
    return 0;
  });
}
