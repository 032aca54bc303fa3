// Live recovery (models/train/live_state.h): three ranks, two at the newest step with the same
// weights and momentum, one that just joined with others; after share_newest_state the joiner holds
// bit for bit the donor's model and optimizer, and a second call moves nothing. Also a rank one
// step behind (its last step did not complete) takes the state too.
#include <catch2/catch.hpp>
#include <cstring>

#include "devices/determinism.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "models/nn/net.h"
#include "models/nn/optimizer.h"
#include "models/train/gradient_reducer.h"
#include "models/train/live_state.h"
#include "net/collectives.h"
#include "support/close.h"
#include "support/ranks.h"

using namespace troupe;
using namespace troupe::models;

namespace {

// One SGD step of the Net on a fixed batch, so that the momentum buffers hold something.
void train_once(Net& net, SGD& optimizer, uint64_t seed) {
  manual_seed(seed);
  Tensor x = rand_normal({4, 1, 28, 28}, 0.0, 1.0);
  Tensor y = Tensor::from_vector<int64_t>({1, 2, 3, 4}, {4});
  optimizer.zero_grad();
  net.eval();  // no dropout: the same step on every rank with the same seed
  nll_loss(net(x), y).backward();
  optimizer.step();
}

// The FNV-1a of every parameter and state tensor: equal iff the states are bit-identical.
int64_t state_hash(Net& net, SGD& optimizer) {
  uint64_t h = 1469598103934665603ull;
  Checkpoint c = capture(0, net, optimizer);
  for (const auto& [name, t] : c.tensors) {
    Tensor contiguous = t.contiguous();
    const auto* bytes = static_cast<const unsigned char*>(contiguous.raw_data());
    for (size_t i = 0; i < contiguous.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return static_cast<int64_t>(h >> 1);
}

}  // namespace

TEST_CASE("models rank: live state", "[.rank]") {
  auto world = net::init_process_group();
  const int rank = world->rank();
  set_deterministic_kernels(true);  // the same step gives the same bits on every rank
  // Ranks 0 and 1: seed 7, two steps (step 2); rank 2: seed 99, one step behind or none.
  const bool joiner = rank == 2;
  manual_seed(joiner ? 99 : 7);
  Net net;
  SGD optimizer(net.parameters(), {.lr = 0.1, .momentum = 0.9});
  int64_t step = 0;
  for (int i = 0; i < (joiner ? 1 : 2); ++i, ++step) train_once(net, optimizer, joiner ? 100 + i : 1 + i);
  if (joiner && std::getenv("LIVE_STATE_JOINER_HAS_NONE")) step = -1;

  Tensor hashes = Tensor::zeros({3}, DType::i64);
  auto gather_hashes = [&] {
    hashes = Tensor::zeros({3}, DType::i64);
    hashes.mutable_data<int64_t>()[rank] = state_hash(net, optimizer);
    net::all_reduce(*world, hashes, net::ReduceOp::sum);
  };
  gather_hashes();
  CHECK(hashes.data<int64_t>()[0] == hashes.data<int64_t>()[1]);
  CHECK(hashes.data<int64_t>()[2] != hashes.data<int64_t>()[0]);

  StateShare share = share_newest_state(*world, step, [&] { return capture(step, net, optimizer, {{"epoch", 3}}); });
  CHECK(share.newest == 2);
  CHECK(share.donor == 0);
  CHECK(share.receivers == 1);
  if (joiner) {
    REQUIRE(share.received.has_value());
    CHECK(share.received->step == 2);
    CHECK(share.received->state.value("epoch", -1) == 3);
    CHECK(share.bytes > 87000);  // the Net's 22k parameters and as many momentum values
    restore(*share.received, net, optimizer);
    step = share.received->step;
  } else {
    CHECK_FALSE(share.received.has_value());
    if (rank == 0) CHECK(share.bytes > 87000);  // sent
    else CHECK(share.bytes == 0);
  }
  gather_hashes();
  CHECK(hashes.data<int64_t>()[0] == hashes.data<int64_t>()[1]);
  CHECK(hashes.data<int64_t>()[2] == hashes.data<int64_t>()[0]);

  // Everyone at the newest step: nothing moves.
  StateShare again = share_newest_state(*world, step, [&] { return capture(step, net, optimizer); });
  CHECK(again.receivers == 0);
  CHECK(again.donor == -1);
  CHECK_FALSE(again.received.has_value());
  CHECK(again.bytes == 0);

  // The same step afterwards on all three: they stay identical (the momentum came across too).
  train_once(net, optimizer, 5);
  gather_hashes();
  CHECK(hashes.data<int64_t>()[2] == hashes.data<int64_t>()[0]);
  CHECK(hashes.data<int64_t>()[1] == hashes.data<int64_t>()[0]);
}

// The transfer overlapped with a step: ranks 0 and 1 split the batch's rows, rank 2 (behind) runs one
// row weighed 0, the gradients are averaged, and rank 2 takes the state after its backward. The
// averaged gradient is the whole batch's, and after the step all three hold the same bits.
TEST_CASE("models rank: live state during a step", "[.rank]") {
  auto world = net::init_process_group();
  const int rank = world->rank();
  set_deterministic_kernels(true);
  const bool joiner = rank == 2;
  manual_seed(joiner ? 99 : 7);
  Net net;
  net.eval();
  SGD optimizer(net.parameters(), {.lr = 0.1, .momentum = 0.9});
  int64_t step = 0;
  for (int i = 0; i < (joiner ? 0 : 2); ++i, ++step) train_once(net, optimizer, 1 + i);
  if (joiner) step = -1;

  manual_seed(11);
  const Tensor x = rand_normal({6, 1, 28, 28}, 0.0, 1.0);
  const Tensor y = Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {6});
  Tensor whole_batch_grad;  // on the ranks with the state, before the step
  if (!joiner) {
    optimizer.zero_grad();
    nll_loss(net(x), y).backward();
    whole_batch_grad = flatten_grads(optimizer.params());
  }

  StateShare share = start_state_share(*world, step, [&] { return capture(step, net, optimizer); });
  CHECK(share.newest == 2);
  CHECK(share.donor == 0);
  CHECK(share.receivers == 1);
  CHECK(share.is_behind(2));
  CHECK_FALSE(share.is_behind(0));
  CHECK_FALSE(share.received.has_value());  // not before finish()
  const auto [part, parts] = share.contributor(rank);
  if (!joiner) CHECK((part == rank && parts == 2));
  const int64_t lo = joiner ? 0 : 6 * part / parts, hi = joiner ? 1 : 6 * (part + 1) / parts;
  const double weight = joiner ? 0.0 : static_cast<double>((hi - lo) * world->size()) / 6.0;
  GradientReducer reducer(*world, net.parameters());
  optimizer.zero_grad();
  mul(nll_loss(net(x.slice(0, lo, hi)), y.slice(0, lo, hi)), Tensor::scalar<float>(static_cast<float>(weight))).backward();
  reducer.finish();
  share.finish();
  if (!joiner) CHECK(relative_error(flatten_grads(optimizer.params()), whole_batch_grad) < 1e-5);
  if (joiner) {
    REQUIRE(share.received.has_value());
    CHECK(share.received->step == 2);
    restore(*share.received, net, optimizer);
  } else {
    CHECK_FALSE(share.received.has_value());
  }
  optimizer.step();

  Tensor hashes = Tensor::zeros({3}, DType::i64);
  hashes.mutable_data<int64_t>()[rank] = state_hash(net, optimizer);
  net::all_reduce(*world, hashes, net::ReduceOp::sum);
  CHECK(hashes.data<int64_t>()[1] == hashes.data<int64_t>()[0]);
  CHECK(hashes.data<int64_t>()[2] == hashes.data<int64_t>()[0]);
}

TEST_CASE("live state: a rank that joined takes the state during a step it adds no gradient to",
          "[models][live_state]") {
  RankRun run = run_ranks(3, "models rank: live state during a step");
  check_all_passed(run, 3);
}

TEST_CASE("live state: a rank one step behind takes the newest state from rank 0's memory", "[models][live_state]") {
  RankRun run = run_ranks(3, "models rank: live state");
  check_all_passed(run, 3);
}

TEST_CASE("live state: a rank that just joined (no state) takes it too", "[models][live_state]") {
  troupe::net::LaunchOptions options;
  options.env = {{"LIVE_STATE_JOINER_HAS_NONE", "1"}};
  RankRun run = run_ranks(3, "models rank: live state", options);
  check_all_passed(run, 3);
}
