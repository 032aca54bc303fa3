// The synchronous SGD of PyTorch's tutorial "Writing Distributed Applications with PyTorch" on Fashion-MNIST: every rank trains the Net on its
// partition with batch 128 / world and gradients averaged across ranks after each backward.
//   troupe launch --nproc 2 -- build/bin/dist_sgd [--epochs 10] [--sync ddp|naive|ring] [--json]
//   troupe launch --nproc 2 --max-restarts 3 -- build/bin/dist_sgd --checkpoint-dir ckpt --resume
//   troupe launch --nproc 2 --nnodes 2:3 --max-restarts 10 --rdzv-endpoint 10.0.0.1:29400 --  # every node
//       build/bin/dist_sgd --elastic --checkpoint-dir /local/ckpt --resume
//   troupe launch --nproc 1 --nnodes 2:3 --max-restarts 10 --rdzv-endpoint 10.0.0.1:29400 --in-place --  # every node
//       build/bin/dist_sgd --elastic
//   troupe launch --nproc 2 -- build/bin/dist_sgd --device cuda    # both ranks on cuda:0
//
// --device cuda trains on the GPU with --sync ddp: the reducer stages the gradients through the
// host (one flat buffer per step, models/train/gradient_reducer.h), so ranks may share one GPU.
//
// Checkpoints (models/train/checkpoint.h): every rank saves its own under DIR/rank-R every
// --checkpoint-every steps (model, momentum, the loader's position, the dropout generator), so no
// shared file system is needed; --resume goes on from the newest step all ranks have saved. With
// the same seed and --deterministic the resumed run ends with bitwise the same weights as an
// uninterrupted one.
//
// --elastic makes the training independent of the world size, so that an elastic job (troupe
// launch --nnodes MIN:MAX) goes on with fewer or more ranks: every step is one global batch of 128
// from one seeded order of the whole training set (the same for every world), rank r of w training
// on rows [128r/w, 128(r+1)/w) with its loss weighted by its share, so that the averaged gradient is
// the global batch's; dropout is seeded per step and rank. Every rank then holds the same state, and
// --resume takes the newest checkpoint any rank holds: that rank sends it to the others, which keep
// it in their own directory (no shared file system).
//
// --elastic under troupe launch --in-place (net/quorum.h) loses no step: when a rank is lost the
// survivors' group re-forms between steps and they go on from their memory, the step in flight
// redone by them on the same global batch (so its gradient is still the whole batch's); a rank
// that joins (started again, or a new node) takes the newest state from a live rank
// (models/train/live_state.h) during the next step, in which it computes nothing of its own; its
// rows of that step are run by the others (--join-rows cover: every row of every batch counts), or
// skipped (--join-rows skip, TorchFT's rule: a recovering replica contributes nothing to the step it
// heals in, and the others' step is as long as any), the gradient then averaged over the rows run.
// Checkpoints, when asked, are still saved (for the loss of the whole job).
//
// Gradient synchronisation:
//   ddp    PyTorch DDP's scheme (models/train/gradient_reducer.h): gradients in buckets of
//          --bucket-kb in reverse parameter order, each all-reduced (avg) asynchronously by the
//          group's collective actor as soon as backward has produced its last gradient. The Net's
//          22k parameters (87 KB) fit one 1 MB bucket, so by default nothing overlaps backward and
//          the gain is one call instead of one per parameter; --bucket-kb 32 cuts it in two (fc
//          layers, then convolutions) and the fc bucket is reduced while the convolutions' backward runs.
//   naive  the distributed tutorial's average_gradients: one all_reduce(sum) per parameter, then a division.
//   ring   the distributed tutorial's hand-written ring all-reduce (p2p only) per parameter.
//
// Recipes: `seed` is the tutorial's (SGD lr 0.01, momentum 0.5); `better` keeps the Net and the
// budget and changes only the optimisation: SGD lr 0.05, Nesterov momentum 0.9, cosine decay of
// the learning rate over the epochs.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "actors/runtime.h"
#include "devices/autograd/grad_mode.h"
#include "devices/determinism.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "devices/threads.h"
#include "models/data/fashion_mnist.h"
#include "models/data/loader.h"
#include "models/data/partition.h"
#include "models/nn/net.h"
#include "models/nn/optimizer.h"
#include "models/train/checkpoint.h"
#include "models/train/gradient_reducer.h"
#include "models/train/live_state.h"
#include "models/train/wide_net.h"
#include "net/collectives.h"
#include "net/quorum.h"
#include "net/seed_ring_all_reduce.h"
#include "examples/command_line.h"
#include "examples/device_option.h"
#include "examples/json_line.h"
#include "examples/run_example.h"

using namespace troupe;
using namespace troupe::models;
namespace fs = std::filesystem;

namespace {

// The tutorial's average_gradients (naive), or the same over its hand-written ring (ring).
void average_gradients(net::ProcessGroup& world, const std::vector<Tensor*>& params, const std::string& sync) {
  const double scale = 1.0 / world.size();
  for (Tensor* p : params) {
    Tensor g = p->grad();
    if (sync == "naive")
      net::all_reduce(world, g, net::ReduceOp::sum);
    else
      net::seed_ring_all_reduce(world, g);
    p->set_grad(mul(g, Tensor::scalar<float>(static_cast<float>(scale))));
  }
}

// FNV-1a over every parameter's bytes (halved to fit int64): equal on all ranks iff the replicas are
// bit-identical.
int64_t parameter_hash(const std::vector<Tensor*>& params) {
  uint64_t h = 1469598103934665603ull;
  for (const Tensor* p : params) {
    Tensor c = p->to(Device::cpu()).contiguous();
    const auto* bytes = static_cast<const unsigned char*>(c.raw_data());
    for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return static_cast<int64_t>(h >> 1);
}

void check_replicas(net::ProcessGroup& world, const std::vector<Tensor*>& params, int64_t step) {
  Tensor mine = Tensor::from_vector<int64_t>({parameter_hash(params)}, {1});
  Tensor low = mine, high = mine;
  net::all_reduce(world, low, net::ReduceOp::min);
  net::all_reduce(world, high, net::ReduceOp::max);
  if (low.item<int64_t>() != high.item<int64_t>())
    throw ValueError("dist_sgd: parameters differ across ranks after step " + std::to_string(step));
}

// The network being trained: the distributed tutorial's Net, or a WideNet (--model wide).
struct Model {
  std::unique_ptr<Module> module;
  std::function<Tensor(const Tensor&)> forward;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void train(bool on = true) { module->train(on); }
  void eval() { module->eval(); }
  std::vector<Tensor*> parameters() { return module->parameters(); }
};

template <class Network>
Model make_model() {
  auto network = std::make_unique<Network>();
  Network* raw = network.get();
  return {std::move(network), [raw](const Tensor& x) { return raw->forward(x); }};
}

double accuracy(Model& model, const Dataset& test, Device device) {
  model.eval();
  NoGradGuard no_grad;
  int64_t correct = 0;
  for (int64_t start = 0; start < test.size(); start += 1000) {
    const int64_t n = std::min<int64_t>(1000, test.size() - start);
    Tensor predicted = argmax(model(test.images.slice(0, start, start + n).to(device)), 1);
    correct += sum(eq(predicted, test.labels.slice(0, start, start + n).to(device)).to(DType::i64)).item<int64_t>();
  }
  model.train();
  return static_cast<double>(correct) / static_cast<double>(test.size());
}

void progress(int epoch, int64_t done, int64_t total, double loss) {
  const int width = 30, filled = static_cast<int>(width * done / std::max<int64_t>(total, 1));
  std::printf("\repoch %d [%s%s] %lld/%lld loss %.4f", epoch, std::string(filled, '#').c_str(),
              std::string(width - filled, '.').c_str(), static_cast<long long>(done), static_cast<long long>(total), loss);
  std::fflush(stdout);
}

// What a checkpoint must match to be resumed by this run: the same model, data, recipe and ranks
// (--epochs may differ: a resumed run may train for longer).
// (--elastic: any world.)
nlohmann::json run_identity(const std::string& model, int world, uint64_t seed, const std::string& recipe, int64_t subset,
                            bool elastic) {
  nlohmann::json id = {{"model", model}, {"seed", seed}, {"recipe", recipe}, {"subset", subset}};
  if (elastic) id["elastic"] = true;
  else id["world"] = world;
  return id;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IOError("dist_sgd: cannot read " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Broadcasts bytes from root: their size, then the bytes.
std::string broadcast_bytes(net::ProcessGroup& world, const std::string& bytes, int root) {
  Tensor size = Tensor::from_vector<int64_t>({static_cast<int64_t>(bytes.size())}, {1});
  net::broadcast(world, size, root);
  Tensor data = Tensor::empty({size.item<int64_t>()}, DType::u8);
  if (world.rank() == root) std::memcpy(data.mutable_data<uint8_t>(), bytes.data(), bytes.size());
  net::broadcast(world, data, root);
  return {reinterpret_cast<const char*>(data.data<uint8_t>()), static_cast<size_t>(data.numel())};
}

// --elastic --resume: the newest checkpoint any rank holds, sent by the lowest rank holding it to
// every other rank, which keeps it in its own directory (its files as CheckpointDir wrote them,
// verified by loading them before they are saved). -1 when no rank has one.
int64_t share_newest_checkpoint(net::ProcessGroup& world, CheckpointDir& mine) {
  const int64_t own = mine.latest().value_or(-1);
  Tensor newest = Tensor::from_vector<int64_t>({own}, {1});
  net::all_reduce(world, newest, net::ReduceOp::max);
  const int64_t step = newest.item<int64_t>();
  if (step < 0) return -1;
  Tensor holder = Tensor::from_vector<int64_t>({own == step ? world.rank() : world.size()}, {1});
  net::all_reduce(world, holder, net::ReduceOp::min);
  const int root = static_cast<int>(holder.item<int64_t>());
  const std::vector<std::string> files = {"tensors.safetensors", "state.json"};
  const fs::path incoming = mine.path() + ".incoming";
  for (const auto& file : files) {
    const std::string bytes =
        broadcast_bytes(world, world.rank() == root ? read_bytes(mine.path_of(step) + "/" + file) : "", root);
    if (own == step) continue;
    fs::create_directories(incoming / ("step-" + std::to_string(step)));
    std::ofstream(incoming / ("step-" + std::to_string(step)) / file, std::ios::binary) << bytes;
  }
  if (own != step) {
    mine.save(CheckpointDir(incoming.string()).load(step));
    fs::remove_all(incoming);
  }
  return step;
}

// In place, every rank first runs one step's kernels on throwaway weights for each share of the
// batch the job's worlds give (TROUPE_WORLD_SIZES from the launcher, the largest 8 of them; 1 to 8
// ranks without it), and for the one row a rank taking the state runs: the kernels chosen by
// timing per shape (devices/determinism.h) (and per thread count: it runs with the training's)
// are then chosen before the rank takes part, not in the first step after the
// world changed (that step took 0.15 s instead of 0.02 here, and a joiner's one row 10 ms instead
// of 0.3; the other ranks wait for it in their all_reduce). Returns the element counts of the model's
// gradient buckets, which each new group's all_reduce is warmed up for (QuorumOptions::warm_up).
// It needs the shapes only (zero images), so it runs while the data loads on another thread: a rank
// started again joins sooner. On the training thread itself: warmed on another, the first step of
// a new world still took 40-55 ms instead of 5. The kernels chosen by timing are remembered on the
// machine (devices/cpu/kernel_choices.h): on an idle 2-core Zen 4 the warm-up takes 0.45 s in the
// first process, 0.14 s in the next ones.
std::vector<int64_t> warm_up(const std::string& model_name, Device device, int64_t bucket_bytes) {
  Model m = model_name == "wide" ? make_model<WideNet>() : make_model<Net>();
  m.module->to(device);
  int64_t smallest = 1, largest = 8;
  if (const char* sizes = std::getenv("TROUPE_WORLD_SIZES"); sizes && *sizes) {
    long long lo = 0, hi = 0;
    char end = 0;
    if (std::sscanf(sizes, "%lld:%lld%c", &lo, &hi, &end) != 2 || lo < 1 || hi < lo)
      throw ValueError(std::string("dist_sgd: TROUPE_WORLD_SIZES='") + sizes + "' is not MIN:MAX, 1 <= MIN <= MAX");
    largest = std::min<int64_t>(hi, 64);  // --elastic runs on at most 64 ranks
    smallest = std::max<int64_t>(lo, largest - 7);
  }
  std::set<int64_t> shares;
  for (int64_t world = smallest; world <= largest; ++world)
    for (int64_t r = 0; r < world; ++r) shares.insert(128 * (r + 1) / world - 128 * r / world);
  shares.insert(1);  // the one row, weighed 0, of a rank taking the state in its first step
  for (int64_t rows : shares)
    nll_loss(m(Tensor::zeros({rows, 1, 28, 28}, DType::f32, device)), Tensor::zeros({rows}, DType::i64, device)).backward();
  return GradientReducer::bucket_counts(m.parameters(), bucket_bytes);
}

// What --elastic training in place needs besides the model, the optimizer and the loader.
struct InPlaceSettings {
  int epochs;
  int64_t step;             // steps done (resumed from a checkpoint, or 0)
  double epoch_loss_sum;    // of the epoch in progress
  uint64_t seed;
  double base_lr;
  bool better;
  std::string sync;
  bool skip_join_rows;  // --join-rows skip
  int64_t bucket_bytes;
  Device device;
  int64_t log_every;
  bool verify, json;
  std::function<Dataset()> test;
  nlohmann::json identity;
  CheckpointDir* checkpoints;  // null: none
  int64_t checkpoint_every;
  std::string checkpoint_dir;
  int64_t resumed_from;
};

// --elastic under troupe launch --in-place: a loss or a join re-forms the quorum's group between
// steps (net/quorum.h); the step in flight when a rank was lost is redone by the survivors (the
// same global batch, split over the new world), and a rank behind (a joiner) takes the newest
// state from a live rank's memory (models/train/live_state.h). Every epoch's rank 0 logs
// "quorum epoch E: world W at step S"; a rank that takes state logs what it took.
int train_in_place(net::Quorum& quorum, Model& model, SGD& optimizer, BatchLoader& loader, const InPlaceSettings& o) {
  const int64_t per_epoch = loader.batches_per_epoch(), steps = per_epoch * o.epochs;
  int64_t step = o.step, state_bytes = 0, redone = 0;
  double epoch_loss_sum = o.epoch_loss_sum;
  int loader_epoch = -1;
  std::optional<GradientReducer> reducer;
  std::optional<StateShare> share;  // a transfer to ranks behind, which goes on during the next step
  bool joined = true;  // the group is new: share the state first
  const auto start = std::chrono::steady_clock::now();
  auto save = [&](int rank) {
    if (!o.checkpoints) return;
    // A checkpoint per epoch rank: DIR/rank-R of this epoch (the last two kept), as without --in-place.
    CheckpointDir(o.checkpoint_dir + "/rank-" + std::to_string(rank), 2)
        .save(capture(step, *model.module, optimizer,
                      {{"run", o.identity},
                       {"epoch", step / per_epoch},
                       {"batch", step % per_epoch},
                       {"epoch_loss_sum", epoch_loss_sum},
                       {"rng", to_json(thread_generator().state())}}));
  };
  try {
    while (step < steps) {
      if (joined || quorum.reform_needed()) {
        reducer.reset();  // it holds the old group
        share.reset();    // a transfer of the old group's, cut by a loss
        try {
          if (!joined) quorum.reform();
          joined = false;
          net::ProcessGroup& group = quorum.group();
          share = start_state_share(group, step, [&] {
            return capture(step, *model.module, optimizer, {{"epoch_loss_sum", epoch_loss_sum}});
          });
          if (group.rank() == 0)
            std::printf("quorum epoch %d: world %d at step %lld%s\n", quorum.epoch(), group.size(),
                        static_cast<long long>(share->newest < 0 ? step : share->newest),
                        share->receivers ? (" (" + std::to_string(share->receivers) + " rank(s) take the state)").c_str() : "");
          std::fflush(stdout);
          if (share->receivers == 0) share.reset();
          if (o.sync == "ddp") reducer.emplace(group, model.parameters(), o.bucket_bytes);
        } catch (const PeerLostError& e) {
          quorum.lost(e);  // lost again while it formed: once more
          continue;
        }
      }
      net::ProcessGroup& group = quorum.group();
      const int rank = group.rank();
      // A rank taking the state runs the others' step with no gradient of its own: its state comes
      // meanwhile (live_state.h), and the step's averaged gradients are then applied to it.
      const bool taking_state = share && share->is_behind(rank);
      const int64_t at = taking_state ? share->newest : step;
      const int epoch = static_cast<int>(at / per_epoch);
      if (loader_epoch != epoch || loader.position() != at % per_epoch) {
        loader.start_epoch(epoch, at % per_epoch);  // the step's global batch, whatever came before
        loader_epoch = epoch;
        if (at % per_epoch == 0) epoch_loss_sum = 0;
      }
      if (o.better) optimizer.options.lr = o.base_lr * 0.5 * (1 + std::cos(M_PI * epoch / o.epochs));
      auto batch = loader.next();
      optimizer.zero_grad();
      // The batch's rows split over the ranks with the state (or, skipping the joiners' rows, over
      // the whole group, theirs left out); a rank taking it runs one row, weighed 0.
      const auto [part, parts] = share && !o.skip_join_rows ? share->contributor(rank) : std::pair{rank, group.size()};
      const int64_t rows = batch->labels.size(0);
      int64_t rows_run = rows;  // the rows whose mean loss the averaged gradient is
      if (share && o.skip_join_rows)
        for (int r = 0; r < group.size(); ++r)
          if (share->is_behind(r)) rows_run -= rows * (r + 1) / group.size() - rows * r / group.size();
      const int64_t lo = taking_state ? 0 : rows * part / parts, hi = taking_state ? 1 : rows * (part + 1) / parts;
      const double weight =
          taking_state ? 0.0 : static_cast<double>((hi - lo) * group.size()) / static_cast<double>(rows_run);
      manual_seed(o.seed * 1000003 + static_cast<uint64_t>(at) * 1009 + static_cast<uint64_t>(rank));
      Tensor loss = nll_loss(model(batch->images.slice(0, lo, hi).to(o.device)), batch->labels.slice(0, lo, hi).to(o.device));
      const float loss_value = taking_state ? 0.0f : loss.item<float>();
      try {
        mul(loss, Tensor::scalar<float>(static_cast<float>(weight))).backward();
        if (reducer)
          reducer->finish();
        else
          average_gradients(group, optimizer.params(), o.sync);
        if (share) share->finish();  // the donor's sends done; a rank taking the state has it
      } catch (const PeerLostError& e) {
        quorum.lost(e);  // the step is redone by the survivors
        ++redone;
        continue;
      }
      if (taking_state) {
        restore(*share->received, *model.module, optimizer);  // the parameters only: the gradients stay
        step = share->received->step;
        epoch_loss_sum = share->received->state.value("epoch_loss_sum", 0.0);
        state_bytes += share->bytes;
        std::printf("took the state of step %lld from rank %d: %lld bytes in %.3f s\n", static_cast<long long>(step),
                    share->donor, static_cast<long long>(share->bytes), share->seconds);
        std::fflush(stdout);
      }
      share.reset();
      optimizer.step();
      ++step;
      epoch_loss_sum += loss_value;
      try {
        if (o.verify) check_replicas(group, optimizer.params(), step);
      } catch (const PeerLostError& e) {
        quorum.lost(e);  // this step stays done here; a rank without it takes the state
      }
      const int64_t done_in_epoch = (step - 1) % per_epoch + 1;
      if (rank == 0 && o.log_every > 0 && step % o.log_every == 0) {
        std::printf("step %lld loss %.4f\n", static_cast<long long>(step), epoch_loss_sum / static_cast<double>(done_in_epoch));
        std::fflush(stdout);
      }
      if (rank == 0 && !o.json && step % per_epoch == 0)
        std::printf("epoch %d loss %.4f\n", epoch, epoch_loss_sum / static_cast<double>(per_epoch));
      if (step % o.checkpoint_every == 0) save(rank);
    }
  } catch (const net::JobEndedError& e) {
    std::printf("dist_sgd: %s\n", e.what());
    return 0;
  }
  const double train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  net::ProcessGroup& group = quorum.group();
  if (group.rank() == 0) {
    const double acc = accuracy(model, o.test(), o.device);
    if (o.json)
      print_json_line(nlohmann::ordered_json{{"device", o.device.str()},
                                             {"world", group.size()},
                                             {"epochs", o.epochs},
                                             {"test_accuracy", rounded(acc, 4)},
                                             {"train_s", rounded(train_s, 2)},
                                             {"sync", o.sync},
                                             {"steps", step},
                                             {"resumed_from", o.resumed_from},
                                             {"in_place", true},
                                             {"quorum_epochs", quorum.epoch() + 1},
                                             {"steps_redone", redone},
                                             {"params_fnv1a", parameter_hash(model.parameters())}});
    else
      std::printf("world=%d epochs=%d sync=%s test_accuracy=%.4f train_time=%.1fs quorum_epochs=%d params_fnv1a=%lld\n",
                  group.size(), o.epochs, o.sync.c_str(), acc, train_s, quorum.epoch() + 1,
                  static_cast<long long>(parameter_hash(model.parameters())));
  }
  if (state_bytes) std::printf("state taken from live ranks: %lld bytes\n", static_cast<long long>(state_bytes));
  std::fflush(stdout);
  reducer.reset();
  quorum.leave();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cli::App app{"distributed synchronous SGD on Fashion-MNIST (the recipe of PyTorch's distributed tutorial)"};
  int epochs = 10, threads = 1;
  int64_t subset = 0, bucket_kb = 1024;
  uint64_t seed = 1234;
  std::string data = kFashionMnistDir, sync = "ddp", recipe = "seed", model_name = "net", device_name = "cpu";
  std::string join_rows = "cover";
  bool json = false, verify = false, resume = false, deterministic = false, elastic = false;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 100, log_every = 0;
  app.add_option("--epochs", epochs, "passes over the training set")->check(cli::PositiveNumber);
  app.add_option("--data", data, "directory of the Fashion-MNIST .gz files");
  app.add_option("--sync", sync, "gradient averaging")->check(cli::IsMember({"ddp", "naive", "ring"}));
  app.add_option("--model", model_name, "net: the distributed tutorial's Net; wide: WideNet (16/32 channels, 128 hidden)")
      ->check(cli::IsMember({"net", "wide"}));
  app.add_option("--recipe", recipe, "optimisation recipe")->check(cli::IsMember({"seed", "better"}));
  app.add_option("--bucket-kb", bucket_kb, "ddp: gradient bucket size")->check(cli::PositiveNumber);
  app.add_option("--seed", seed, "partition, shuffling, initial weights and dropout (the distributed tutorial's 1234)");
  app.add_option("--subset", subset, "train on the first N images only (0: all)")->check(cli::NonNegativeNumber);
  app.add_option("--threads", threads, "intra-op threads per rank")->check(cli::PositiveNumber);
  app.add_flag("--deterministic", deterministic,
               "deterministic kernels (devices/determinism.h): runs with the same seed end with the same weights, resumed or not");
  app.add_flag("--verify", verify, "check after every step that all ranks hold bit-identical parameters");
  app.add_flag("--json", json, "rank 0 ends with one JSON line of figures");
  add_device_option(app, device_name);
  app.add_option("--checkpoint-dir", checkpoint_dir, "save checkpoints under DIR/rank-R (the last two kept)");
  app.add_option("--checkpoint-every", checkpoint_every, "steps between checkpoints")->check(cli::PositiveNumber);
  app.add_flag("--resume", resume, "go on from the newest checkpoint every rank has (a fresh start when there is none)");
  app.add_flag("--elastic", elastic,
               "global batches independent of the world size; --resume takes the newest checkpoint of any rank, of any world");
  app.add_option("--log-every", log_every, "rank 0 prints the step and its loss every N steps (0: never)")
      ->check(cli::NonNegativeNumber);
  app.add_option("--join-rows", join_rows,
                 "--elastic in place: in the step in which joining ranks take the state, their rows are run by the "
                 "others (cover) or skipped (skip: the others' step takes no longer)")
      ->check(cli::IsMember({"cover", "skip"}));
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
  if (resume && checkpoint_dir.empty()) {
    std::fprintf(stderr, "dist_sgd: --resume needs --checkpoint-dir\n");
    return 2;
  }

  return run_example("dist_sgd", [&] {
    const Device device = example_device(device_name);
    if (!device.is_cpu() && sync != "ddp")
      throw ValueError("dist_sgd: --device " + device_name + " takes --sync ddp (gradients staged through the host), not " + sync);
    if (!device.is_cpu() && !checkpoint_dir.empty())
      throw ValueError("dist_sgd: --checkpoint-dir is for --device cpu (checkpoints are saved from host tensors)");
    // The data and the kernels first: a rank that joins a running job is ready to train when it joins.
    auto loading = std::async(std::launch::async, [&] { return load_fashion_mnist(data, "train", subset); });
    // In place (troupe launch --in-place sets TROUPE_QUORUM): the group is the quorum's epoch's.
    const bool in_place = elastic && net::Quorum::configured();
    std::vector<int64_t> buckets;
    if (in_place) {
      set_intra_op_threads(threads);  // the kernels are chosen per thread count too
      if (deterministic) set_deterministic_kernels(true);
      buckets = warm_up(model_name, device, bucket_kb * 1024);
    }
    Dataset train = loading.get();
    std::optional<net::Quorum> quorum;
    if (in_place) {
      net::QuorumOptions options;
      if (sync == "ddp")
        options.warm_up = [buckets](net::ProcessGroup& group) { GradientReducer::warm_up(group, buckets, DType::f32); };
      try {
        quorum.emplace(options);
      } catch (const net::JobEndedError& e) {  // a rank started again as the job ended
        std::printf("dist_sgd: %s: nothing to do\n", e.what());
        return 0;
      }
    }
    auto world = in_place ? quorum->shared_group() : net::init_process_group();
    const int rank = world->rank(), size = world->size();
    if (!elastic && 128 % size != 0)
      throw ValueError("dist_sgd: the global batch 128 does not split over " + std::to_string(size) + " ranks (--elastic splits it unevenly)");
    if (elastic && size > 64) throw ValueError("dist_sgd: --elastic shares a batch of 128 (the last may hold 64) over at most 64 ranks, not " + std::to_string(size));
    set_intra_op_threads(threads);
    if (deterministic) set_deterministic_kernels(true);
    Runtime runtime({.workers = 1});  // the loader's prefetch task; training runs on this thread

    // --elastic: every rank draws the global batch and trains on its share.
    DataPartitioner parts(train.size(), std::vector<double>(static_cast<size_t>(elastic ? 1 : size), elastic ? 1.0 : 1.0 / size), seed);
    BatchLoader loader(train, parts.partition(elastic ? 0 : rank), elastic ? 128 : 128 / size,
                       elastic ? seed : seed + static_cast<uint64_t>(rank));

    manual_seed(seed);
    Model model = model_name == "wide" ? make_model<WideNet>() : make_model<Net>();
    // One starting point, like DDP (in place: the seed's, the same everywhere; a rank that joins
    // later takes the live state instead).
    for (Tensor* p : in_place ? std::vector<Tensor*>{} : model.parameters()) {  // *p keeps its autograd record
      Tensor received = p->detach();
      net::broadcast(*world, received, 0);
      std::memcpy(p->mutable_data<float>(), received.data<float>(), p->nbytes());
    }
    model.module->to(device);  // before the reducer hooks the parameters and the optimizer holds them
    std::optional<GradientReducer> reducer;  // hooks the parameters: after the broadcast, before training
    if (sync == "ddp" && !in_place) reducer.emplace(*world, model.parameters(), bucket_kb * 1024);
    const bool better = recipe == "better";
    const double base_lr = better ? 0.05 : 0.01;
    SGD optimizer(model.parameters(), {.lr = base_lr, .momentum = better ? 0.9 : 0.5, .nesterov = better});
    manual_seed(seed + static_cast<uint64_t>(rank));  // dropout masks differ per rank, as in the distributed tutorial
    const bool bar = rank == 0 && !json && isatty(STDOUT_FILENO);

    const nlohmann::json identity = run_identity(model_name, size, seed, recipe, subset, elastic);
    std::optional<CheckpointDir> checkpoints;
    if (!checkpoint_dir.empty()) checkpoints.emplace(checkpoint_dir + "/rank-" + std::to_string(rank), 2);
    int first_epoch = 0;
    int64_t step = 0, first_batch = 0, resumed_from = -1;
    double first_total = 0;
    if (resume && (!in_place || quorum->epoch() == 0)) {  // in place: the job's first epoch resumes
      // The newest step every rank has: each keeps its last two, and no rank gets a save ahead of
      // another's previous one (every step waits for all ranks' gradients).
      Tensor newest = Tensor::from_vector<int64_t>({checkpoints->latest().value_or(-1)}, {1});
      if (elastic)
        newest = Tensor::from_vector<int64_t>({share_newest_checkpoint(*world, *checkpoints)}, {1});
      else
        net::all_reduce(*world, newest, net::ReduceOp::min);
      if (newest.item<int64_t>() >= 0) {
        Checkpoint c = checkpoints->load(newest.item<int64_t>());
        if (c.state.value("run", nlohmann::json()) != identity)
          throw ValueError("dist_sgd: checkpoint " + checkpoints->path_of(c.step) + " was saved by the run " +
                           c.state.value("run", nlohmann::json()).dump() + ", not this one " + identity.dump());
        restore(c, *model.module, optimizer);
        if (!elastic) thread_generator().set_state(generator_state_from_json(c.state.at("rng")));
        step = resumed_from = c.step;
        first_epoch = c.state.at("epoch").get<int>();
        first_batch = c.state.at("batch").get<int64_t>();
        first_total = c.state.at("epoch_loss_sum").get<double>();
        if (rank == 0)
          std::printf("resumed from %s: step %lld, epoch %d, batch %lld\n", checkpoints->path_of(c.step).c_str(),
                      static_cast<long long>(c.step), first_epoch, static_cast<long long>(first_batch));
      }
    }

    const auto start = std::chrono::steady_clock::now();
    if (in_place) {
      world.reset();  // the quorum's groups come and go: held by the quorum alone
      return train_in_place(*quorum, model, optimizer, loader, {.epochs = epochs,
                                                               .step = step,
                                                               .epoch_loss_sum = first_total,
                                                               .seed = seed,
                                                               .base_lr = base_lr,
                                                               .better = better,
                                                               .sync = sync,
                                                               .skip_join_rows = join_rows == "skip",
                                                               .bucket_bytes = bucket_kb * 1024,
                                                               .device = device,
                                                               .log_every = log_every,
                                                               .verify = verify,
                                                               .json = json,
                                                               .test = [&] { return load_fashion_mnist(data, "t10k"); },
                                                               .identity = identity,
                                                               .checkpoints = checkpoints ? &*checkpoints : nullptr,
                                                               .checkpoint_every = checkpoint_every,
                                                               .checkpoint_dir = checkpoint_dir,
                                                               .resumed_from = resumed_from});
    }
    for (int epoch = first_epoch; epoch < epochs; ++epoch) {
      const bool resumed_epoch = epoch == first_epoch;
      loader.start_epoch(epoch, resumed_epoch ? first_batch : 0);
      if (better) optimizer.options.lr = base_lr * 0.5 * (1 + std::cos(M_PI * epoch / epochs));
      double total = resumed_epoch ? first_total : 0;
      int64_t batches = loader.position();
      while (auto batch = loader.next()) {
        optimizer.zero_grad();
        double weight = 1;  // --elastic: this rank's share of the global batch, times the world
        if (elastic) {
          const int64_t rows = batch->labels.size(0), lo = rows * rank / size, hi = rows * (rank + 1) / size;
          batch = Batch{batch->images.slice(0, lo, hi), batch->labels.slice(0, lo, hi)};
          weight = static_cast<double>((hi - lo) * size) / static_cast<double>(rows);
          manual_seed(seed * 1000003 + static_cast<uint64_t>(step) * 1009 + static_cast<uint64_t>(rank));
        }
        Tensor loss = nll_loss(model(batch->images.to(device)), batch->labels.to(device));
        total += loss.item<float>();
        if (elastic) loss = mul(loss, Tensor::scalar<float>(static_cast<float>(weight)));
        loss.backward();
        if (reducer)
          reducer->finish();
        else
          average_gradients(*world, optimizer.params(), sync);
        optimizer.step();
        ++batches;
        ++step;
        if (verify) check_replicas(*world, optimizer.params(), step);
        if (rank == 0 && log_every > 0 && step % log_every == 0) {
          std::printf("step %lld loss %.4f\n", static_cast<long long>(step), total / batches);
          std::fflush(stdout);  // seen as it happens, also through a pipe
        }
        if (checkpoints && step % checkpoint_every == 0)
          checkpoints->save(capture(step, *model.module, optimizer,
                                    {{"run", identity},
                                     {"epoch", epoch},
                                     {"batch", loader.position()},
                                     {"epoch_loss_sum", total},
                                     {"rng", to_json(thread_generator().state())}}));
        if (bar && batches % 20 == 0) progress(epoch, batches, loader.batches_per_epoch(), total / batches);
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (bar) std::printf("\n");
      if (rank == 0 && !json) std::printf("epoch %d loss %.4f elapsed %.1fs\n", epoch, total / batches, seconds);
      std::fflush(stdout);
    }
    const double train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rank == 0) {
      const double acc = accuracy(model, load_fashion_mnist(data, "t10k"), device);
      if (json)
        print_json_line(nlohmann::ordered_json{{"device", device.str()},
                                               {"world", size},
                                               {"epochs", epochs},
                                               {"test_accuracy", rounded(acc, 4)},
                                               {"train_s", rounded(train_s, 2)},
                                               {"sync", sync},
                                               {"recipe", recipe},
                                               {"steps", step},
                                               {"resumed_from", resumed_from},
                                               {"params_fnv1a", parameter_hash(model.parameters())}});
      else
        std::printf("world=%d epochs=%d sync=%s recipe=%s test_accuracy=%.4f train_time=%.1fs params_fnv1a=%lld\n",
                    size, epochs, sync.c_str(), recipe.c_str(), acc, train_s,
                    static_cast<long long>(parameter_hash(model.parameters())));
    }
    net::barrier(*world);
    return 0;
  });
}
