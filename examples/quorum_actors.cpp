// Training written with remote actors under an in-place elastic job (net/quorum.h): every rank
// hosts a worker actor, and the epoch's rank 0 drives. Each step the driver sends every worker the
// step, the weights and its share of one global batch, sums the gradients that come back and
// updates the weights. Least squares on a dataset every rank makes from one seed, so the result is
// the same whatever the world: a loss or a join costs no step.
//
//   troupe launch --in-place --nproc 1 --nnodes 2:3 --rdzv-endpoint HOST:PORT -- quorum_actors --steps 300
//
// No rank is special. The driver is whichever rank is rank 0 of the current epoch. Its state (the
// step and the weights) goes to every worker with every call, and each worker keeps the newest it
// got. So when the driver is lost, the next epoch's rank 0 asks every worker for that state,
// takes the newest, and redoes the step that was in flight. A worker that is lost makes the
// driver's call fail (PeerLostError): the driver reports it, the quorum forms the next epoch at
// once, and the step is redone over the survivors' shares. A driver that sees a new epoch ready (a
// rank joined) hands over at a step boundary by leaving the epoch's group; the workers' serve()
// then returns, and they change groups too.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "devices/ops.h"
#include "devices/random.h"
#include "examples/command_line.h"
#include "examples/json_line.h"
#include "examples/least_squares.h"
#include "examples/run_example.h"
#include "net/quorum.h"
#include "net/remote/remote_actor.h"

using namespace troupe;
using namespace troupe::net;

namespace {

// A rank's actor: the gradient of its share, and the newest driver state it was sent.
class Worker {
 public:
  explicit Worker(std::shared_ptr<const LeastSquares> data) : data_(std::move(data)) {}

  // The summed gradient of the squared error over rows [begin, end) at w (the driver divides).
  Tensor gradient(int64_t step, const Tensor& w, int64_t begin, int64_t end) {
    {
      std::lock_guard lock(mutex_);
      if (step >= last_step_) {
        last_step_ = step;
        last_weights_ = w.clone();
      }
    }
    return data_->gradient(w, begin, end);
  }
  int64_t last_step() const {
    std::lock_guard lock(mutex_);
    return last_step_;
  }
  Tensor last_weights() const {
    std::lock_guard lock(mutex_);
    return last_weights_;
  }
  // The job's end, from the driver: this rank leaves the quorum once serve() returns.
  void finish() { finished = true; }

  std::atomic<bool> finished{false};

 private:
  std::shared_ptr<const LeastSquares> data_;
  mutable std::mutex mutex_;
  int64_t last_step_ = -1;
  Tensor last_weights_;
};


struct Driven {
  int64_t redone = 0;  // steps whose calls failed and ran again in the next epoch
  int epochs_driven = 0;
};

std::string worker_name(int rank) { return "quorum.worker/" + std::to_string(rank); }

// Rank 0 of the epoch: takes the newest state any worker holds (its own step and weights when it
// drove before and they are newer), then drives until the job is done or a new epoch is ready.
// Returns whether the job is done.
bool drive(Quorum& quorum, const LeastSquares& data, const LeastSquaresSettings& o, int64_t& step, Tensor& w, Driven& driven) {
  ProcessGroup& group = quorum.group();
  std::vector<RemoteActor> workers;
  for (int r = 0; r < group.size(); ++r) workers.push_back(lookup(worker_name(r), std::chrono::seconds(30)));
  int donor = -1;
  for (int r = 0; r < group.size(); ++r) {
    const int64_t theirs = workers[r].request<int64_t>("last_step").get();
    if (theirs > step || (theirs == step && !w.defined())) {
      step = theirs;
      w = workers[r].request<Tensor>("last_weights").get();
      donor = r;
    }
  }
  if (!w.defined()) w = Tensor::zeros({kLeastSquaresFeatures, 1});
  ++driven.epochs_driven;
  std::printf("quorum epoch %d: world %d, driven by this rank from step %lld%s\n", quorum.epoch(), group.size(),
              static_cast<long long>(step), donor >= 0 ? (" (state from rank " + std::to_string(donor) + ")").c_str() : "");
  std::fflush(stdout);
  while (step < o.steps) {
    if (quorum.reform_needed()) return false;  // a rank joined: hand over at this boundary
    std::vector<Future<Tensor>> shares;
    const int world = group.size();
    for (int r = 0; r < world; ++r)
      shares.push_back(workers[r].request<Tensor>("gradient", step, w, kLeastSquaresRows * r / world, kLeastSquaresRows * (r + 1) / world));
    Tensor gradient = Tensor::zeros({kLeastSquaresFeatures, 1});
    try {
      for (auto& share : shares) gradient = add(gradient, share.get());
    } catch (const PeerLostError&) {
      ++driven.redone;
      throw;
    }
    w = sub(w, mul(gradient, o.lr / kLeastSquaresRows));
    ++step;
    if (step % o.log_every == 0 || step == o.steps) {
      std::printf("step %lld loss %.6f\n", static_cast<long long>(step), data.loss(w));
      std::fflush(stdout);
    }
    if (o.pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.pause_ms));
  }
  for (RemoteActor& worker : workers) worker.request("finish").get();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  LeastSquaresSettings o;
  cli::App app{"Least squares trained by remote actors in an in-place elastic job (troupe launch --in-place)"};
  add_least_squares_options(app, o);
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
  return run_example("quorum_actors", [&] {
    if (!Quorum::configured())
      throw ValueError("quorum_actors runs under troupe launch --in-place (TROUPE_QUORUM is not set)");
    auto data = std::make_shared<const LeastSquares>();
    auto worker = std::make_shared<Worker>(data);
    Quorum quorum;
    int64_t step = 0;
    Tensor w;  // the driver's state, when this rank drives
    Driven driven;
    bool done = false;
    const auto start = std::chrono::steady_clock::now();
    while (!done) {
      try {
        // One RemoteActors per epoch, on the epoch's group: this rank's worker under its epoch rank.
        RemoteActors actors(quorum.shared_group());
        host(worker_name(quorum.group().rank()), worker, Method{"gradient", &Worker::gradient},
             Method{"last_step", &Worker::last_step}, Method{"last_weights", &Worker::last_weights},
             Method{"finish", &Worker::finish});
        if (quorum.group().rank() == 0)
          done = drive(quorum, *data, o, step, w, driven);
        else
          serve();  // until the driver finishes, hands over, or is lost
        done = done || worker->finished;
      } catch (const CommError& e) {  // PeerLostError or the group broken under a call
        quorum.lost(e);
      }
      if (!done) quorum.reform();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (driven.epochs_driven > 0 && step == o.steps) {
      const double loss = data->loss(w);
      std::printf("done: %lld steps, loss %.6f, %d epochs, %lld steps redone, %.2f s\n", static_cast<long long>(step),
                  loss, quorum.epoch() + 1, static_cast<long long>(driven.redone), seconds);
      if (o.json)
        print_json_line(nlohmann::ordered_json{{"steps", step},
                         {"loss", loss},
                         {"quorum_epochs", quorum.epoch() + 1},
                         {"steps_redone", driven.redone},
                         {"seconds", seconds}});
    }
    quorum.leave();
    return 0;
  });
}
