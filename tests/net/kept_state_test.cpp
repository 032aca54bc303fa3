// Supervised actors that come back with their state (TROUPE_STATE, net::replayable): the
// declaration, snapshots in a world of one, and a respawn from snapshots between real processes
// whose hosting ranks are killed (the ranks: kept_state_ranks.cpp).
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "devices/backend.h"
#include "net/bootstrap/launcher.h"
#include "net/remote/remote_actor.h"
#include "support/close.h"
#include "support/ranks.h"
#include "support/skip.h"
#include "support/thrown.h"

using namespace troupe;
using namespace troupe::net;

namespace {

class Account {
 public:
  int64_t add(int64_t amount) { return total_ += amount; }
  int64_t total() const { return total_; }
  void reset() { total_ = 0; }

 private:
  int64_t total_ = 0;
  Tensor history_ = Tensor::zeros({2});
  TROUPE_STATE(total_, history_)  // private members
};
TROUPE_ACTOR(Account, "test.account", net::replayable(&Account::add), &Account::total, &Account::reset);

struct Unready {  // a state that cannot be snapshotted yet
  Tensor weights;  // undefined
  TROUPE_STATE(weights)
};
TROUPE_ACTOR(Unready, "test.unready");

struct Stateless {
  int64_t one() const { return 1; }
};
TROUPE_ACTOR(Stateless, "test.stateless", &Stateless::one);

}  // namespace

TEST_CASE("TROUPE_STATE: a snapshot holds the listed members and restores them; replayable and const are marked",
          "[net][remote][kept]") {
  const ActorType* type = find_actor_type("test.account");
  REQUIRE(type);
  REQUIRE(type->snapshot);
  REQUIRE(type->restore);
  CHECK(type->method("add")->replayable);
  CHECK(type->method("add")->changes_state);
  CHECK_FALSE(type->method("total")->replayable);
  CHECK_FALSE(type->method("total")->changes_state);
  CHECK_FALSE(type->method("reset")->replayable);
  CHECK(type->method_names() == "add, total, reset");
  auto a = type->construct(WireValue::list({}));
  type->method("add")->call(a.get(), WireValue::list({WireValue::integer(5)}));
  const WireValue state = type->snapshot->call(a.get(), WireValue::list({}));
  REQUIRE(state.as_list().size() == 2);
  CHECK(state.as_list()[0].as_int() == 5);
  auto b = type->construct(WireValue::list({}));
  type->restore(b.get(), state);
  CHECK(type->method("total")->call(b.get(), WireValue::list({})).as_int() == 5);
  CHECK_THAT(thrown<ValueError>([&] { type->restore(b.get(), WireValue::list({WireValue::integer(1), WireValue::integer(2)})); }),
             Catch::Contains("state member 2: expected a tensor, got an int"));
  CHECK_FALSE(find_actor_type("test.stateless")->snapshot);
}

TEST_CASE("kept state: snapshots in a world of one; what snapshot() and snapshot_every refuse", "[net][remote][kept]") {
  auto world = world_of_one();
  RemoteActors actors(world);
  SpawnOptions o{.rank = 0, .name = "account", .max_restarts = 1};
  o.snapshot_every = 2;
  RemoteActor a = spawn_on(o, "test.account");
  for (int64_t i = 1; i <= 5; ++i) a.send("add", i);
  CHECK(a.request<int64_t>("total").get() == 15);
  a.snapshot();
  CHECK(a.request<int64_t>("add", 1).get() == 16);
  a.snapshot();
  CHECK_THAT(thrown<ValueError>([&] { spawn_on(0, "test.account").snapshot(); }),
             Catch::Contains("remote actor 'test.account/0' keeps no state here"));
  CHECK_THAT(thrown<ValueError>([&] { lookup("account").snapshot(); }), Catch::Contains("keeps no state here"));
  SpawnOptions every{.rank = 0, .name = "", .max_restarts = 0};
  every.snapshot_every = 3;
  CHECK_THAT(thrown<ValueError>([&] { spawn_on(every, "test.account"); }),
             Catch::Contains("spawn_on: test.account: snapshot_every needs max_restarts > 0") &&
                 Catch::Contains("max_restarts is 0"));
  every.max_restarts = 1;
  CHECK_THAT(thrown<ValueError>([&] { spawn_on(every, "test.stateless"); }),
             Catch::Contains("it declares no TROUPE_STATE"));
  every.snapshot_every = -1;
  thrown<ValueError>([&] { spawn_on(every, "test.account"); });
  a.stop();
  CHECK_THAT(thrown<ValueError>([&] { a.snapshot(); }), Catch::Contains("stopped"));
  RemoteActor unready = spawn_on(SpawnOptions{.rank = 0, .name = "unready", .max_restarts = 1}, "test.unready");
  CHECK_THAT(thrown<ValueError>([&] { unready.snapshot(); }),
             Catch::Contains("remote actor 'unready' on rank 0: troupe.snapshot: ") &&
                 Catch::Contains("the tensor is undefined"));
}

// Launches `rank_test` of kept_state_ranks.cpp on n ranks under `o` (here, or on cluster_test.cpp's
// hosts) and checks that rank 0 passed once every other rank was killed by its actor's die().
RankRun run_killing_ranks(int n, const std::string& rank_test, LaunchOptions o) {
  o.stop_on_failure = false;  // the ranks that are killed on purpose
  RankRun run = run_ranks(n, rank_test, o);
  INFO(run.output);
  REQUIRE(run.result.ranks.size() == static_cast<size_t>(n));
  CHECK(run.result.ranks[0].exit_code == 0);
  for (int r = 1; r < n; ++r) CHECK(run.result.ranks[r].signal == 9);
  CHECK(run.passed_ranks() == 1);
  return run;
}

TEST_CASE("kept state: a supervised actor whose rank is killed comes back with its state, in-flight calls replayed",
          "[net][remote][kept]") {
  const RankRun run = run_killing_ranks(3, "kept state rank: respawn from snapshots", {});
  INFO(run.output);
  CHECK(run.count("[rank 0] remote actors: rank 0: 'ledger' respawned on rank 0 from its last snapshot without 2 "
                  "call(s) made since: note is not replayable") == 1);
}

TEST_CASE("kept state: an actor on cuda:0 comes back there with its tensors", "[net][remote][kept][cuda]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  run_killing_ranks(2, "kept state rank: on cuda", {});
}
