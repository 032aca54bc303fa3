// The ranks of kept_state_test.cpp (and of cluster_test.cpp's run on the test cluster): actors that
// come back with their state after their rank is killed. Rank 0 drives, the others serve().
//   troupe launch --nproc 3 -- build/bin/test_net "kept state rank: respawn from snapshots"
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "devices/ops.h"
#include "net/remote/remote_actor.h"
#include "support/close.h"
#include "support/thrown.h"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

// Deposits and tensor sums are replayable (deterministic, no outside effects); notes are not.
class Ledger {
 public:
  explicit Ledger(std::string owner) : owner_(std::move(owner)) {}
  int64_t deposit(int64_t amount) {
    entries_.push_back(amount);
    return balance_ += amount;
  }
  Tensor accumulate(const Tensor& x) { return sum_ = add(sum_, x.to(sum_.device())); }
  void note(const std::string& text) { notes_.push_back(text); }
  int64_t balance() const { return balance_; }
  std::vector<int64_t> entries() const { return entries_; }
  std::vector<std::string> notes() const { return notes_; }
  Tensor sum() const { return sum_; }
  std::string where() const { return owner_ + "@" + std::getenv("RANK"); }
  void block(double seconds) const { std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); }
  void block_other(const std::string& name, double seconds) { lookup(name).request("block", seconds).get(); }
  void die() const { ::kill(::getpid(), SIGKILL); }
  void to(Device device) { sum_ = sum_.to(device); }  // spawned on a device: its tensor goes there
  std::string device() const { return sum_.device().str(); }

 private:
  std::string owner_;
  int64_t balance_ = 0;
  std::vector<int64_t> entries_;
  std::vector<std::string> notes_;
  Tensor sum_ = Tensor::zeros({3});
  TROUPE_STATE(balance_, entries_, notes_, sum_)
};
TROUPE_ACTOR(Ledger(std::string), "test.ledger", net::replayable(&Ledger::deposit), net::replayable(&Ledger::accumulate),
             &Ledger::note, &Ledger::balance, &Ledger::entries, &Ledger::notes, &Ledger::sum, &Ledger::where,
             &Ledger::block, net::replayable(&Ledger::block_other), &Ledger::die, &Ledger::device);

std::vector<int64_t> one_to(int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 1; i <= n; ++i) v.push_back(i);
  return v;
}

// Rank 1 is killed with calls in flight: the ledger comes back on rank 2 with every deposit, the
// one in flight answered there; one never snapshotted comes back from its constructor and its
// calls. Then rank 2 is killed after a note (not replayable): the ledger comes back on rank 0 with
// the state of its last snapshot, and the deposit in flight fails with PeerLostError.
void respawn_from_snapshots() {
  SpawnOptions o{.rank = 1, .name = "ledger", .max_restarts = 2};
  o.snapshot_every = 4;
  RemoteActor ledger = spawn_on(o, "test.ledger", "ann");
  RemoteActor fresh = spawn_on(SpawnOptions{.rank = 1, .name = "fresh", .max_restarts = 1}, "test.ledger", "bob");
  RemoteActor killer = spawn_on(1, "test.ledger", "killer");
  RemoteActor relay = spawn_on(SpawnOptions{.rank = 2, .name = "relay", .max_restarts = 1}, "test.ledger", "r");
  const Tensor ones = Tensor::ones({3});

  ledger.send("note", "first");
  for (int64_t i = 1; i <= 7; ++i) CHECK(ledger.request<int64_t>("deposit", i).get() == i * (i + 1) / 2);
  ledger.send("accumulate", ones);  // the 8th state-changing call: a snapshot after it
  for (int64_t i = 1; i <= 3; ++i) fresh.send("deposit", i);
  CHECK(fresh.request<int64_t>("balance").get() == 6);
  Future<WireValue> blocked = ledger.request("block", 1.5);
  Future<int64_t> queued = ledger.request<int64_t>("deposit", 8);  // waits behind the block
  ledger.send("accumulate", ones);
  // A replayable call whose own call to rank 1 meets the loss: its PeerLostError comes back at
  // once, as rank 2 lives on (no respawn to wait for).
  Future<WireValue> relayed = relay.request("block_other", "fresh", 60.0);
  std::this_thread::sleep_for(200ms);
  killer.send("die");
  Future<int64_t> meanwhile = ledger.request<int64_t>("deposit", 10);  // during the respawn, or before the loss
  auto m = thrown<PeerLostError>([&] { blocked.get(); });  // not replayable: at most once
  CHECK_THAT(m, Catch::Contains("remote actor 'ledger' on rank 1: block: "));
  CHECK(queued.get() == 36);
  CHECK_THAT(thrown<PeerLostError>([&] { relayed.get(); }), Catch::Contains("remote actor 'relay' on rank 2: block_other: "));
  CHECK(relay.rank() == 2);
  CHECK(meanwhile.get() == 46);
  CHECK(ledger.rank() == 2);
  CHECK(ledger.request<std::string>("where").get() == "ann@2");
  CHECK(ledger.request<int64_t>("balance").get() == 46);
  std::vector<int64_t> entries = one_to(8);
  entries.push_back(10);
  CHECK(ledger.request<std::vector<int64_t>>("entries").get() == entries);
  CHECK(ledger.request<std::vector<std::string>>("notes").get() == std::vector<std::string>{"first"});
  check_close(ledger.request<Tensor>("sum").get(), Tensor::full({3}, 2.0));
  CHECK(lookup("ledger").rank() == 2);
  CHECK(fresh.request<std::string>("where").get() == "bob@2");
  CHECK(fresh.request<std::vector<int64_t>>("entries").get() == one_to(3));

  RemoteActor killer2 = spawn_on(2, "test.ledger", "killer2");
  ledger.snapshot();
  ledger.send("note", "lost");
  blocked = ledger.request("block", 1.5);
  queued = ledger.request<int64_t>("deposit", 9);
  std::this_thread::sleep_for(200ms);
  killer2.send("die");
  thrown<PeerLostError>([&] { blocked.get(); });
  m = thrown<PeerLostError>([&] { queued.get(); });
  CHECK_THAT(m, Catch::Contains("remote actor 'ledger' on rank 0: deposit: "));
  CHECK_THAT(m, Catch::Contains("note, called since the last snapshot, is not replayable"));
  CHECK(ledger.rank() == 0);
  CHECK(ledger.request<std::string>("where").get() == "ann@0");
  CHECK(ledger.request<int64_t>("balance").get() == 46);
  CHECK(ledger.request<std::vector<std::string>>("notes").get() == std::vector<std::string>{"first"});
  CHECK(ledger.request<int64_t>("deposit", 4).get() == 50);  // and it goes on
}

// On a GPU: the ledger's tensor lives on cuda:0 of rank 1; its snapshot comes to rank 0, and the
// respawn there restores it and moves it to cuda:0 again.
void respawn_on_cuda() {
  RemoteActor ledger =
      spawn_on(SpawnOptions{.rank = 1, .name = "gpu", .max_restarts = 1, .device = Device::cuda(0)}, "test.ledger", "g");
  RemoteActor killer = spawn_on(1, "test.ledger", "killer");
  const Tensor ones = Tensor::ones({3});
  // A result from another rank arrives as host bytes; one from this rank's own host stays on its GPU.
  check_close(ledger.request<Tensor>("accumulate", ones).get().to(Device::cpu()), ones);
  CHECK(ledger.request<std::string>("device").get() == "cuda:0");
  ledger.snapshot();
  ledger.send("accumulate", ones);  // replayed
  killer.send("die");
  Future<Tensor> after = ledger.request<Tensor>("accumulate", Tensor::zeros({3}));
  check_close(after.get().to(Device::cpu()), Tensor::full({3}, 2.0));
  CHECK(ledger.rank() == 0);
  CHECK(ledger.request<std::string>("device").get() == "cuda:0");
}

// This rank's part: rank 0 drives, the others serve until they are killed.
template <class Drive>
void kept_state_rank(Drive&& drive) {
  InitOptions o;
  o.timeout = 30s;
  auto world = init_process_group(o);
  RemoteActors actors(world);
  if (world->rank() == 0)
    drive();
  else
    serve();
}

}  // namespace

TEST_CASE("kept state rank: respawn from snapshots", "[.rank]") { kept_state_rank(respawn_from_snapshots); }
TEST_CASE("kept state rank: on cuda", "[.rank]") { kept_state_rank(respawn_on_cuda); }
