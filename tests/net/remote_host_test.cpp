// Remote actors hosted from objects this rank already holds (host()), and the RemoteActors that
// libraries get from ensure(): in a world of one, where every call goes through the same
// mailboxes, names and directory as between ranks.
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <thread>

#include "devices/ops.h"
#include "net/remote/remote_actor.h"
#include "support/close.h"
#include "support/ranks.h"
#include "support/thrown.h"

using namespace troupe;
using namespace troupe::net;

namespace {

struct Tally {
  int64_t add(int64_t x) { return total += x; }
  int64_t read() const { return total; }
  Tensor scale(const Tensor& x, double by) const { return mul(x, by); }
  int64_t total = 0;
};
TROUPE_ACTOR(Tally, "test.tally", &Tally::add, &Tally::read);

}  // namespace

TEST_CASE("remote actors: an object hosted by name answers calls in order until it is stopped", "[net][remote]") {
  auto world = world_of_one();
  RemoteActors actors(world);
  auto tally = std::make_shared<Tally>();
  RemoteActor a = host("app.tally", tally, Method{"add", &Tally::add}, Method{"read", &Tally::read},
                       Method{"scale", &Tally::scale});
  CHECK(a.name() == "app.tally");
  CHECK(a.type().empty());
  CHECK(a.rank() == 0);
  CHECK(a.request<int64_t>("add", 2).get() == 2);
  a.send("add", 3);
  RemoteActor found = lookup("app.tally");
  CHECK(found.request<int64_t>("read").get() == 5);  // after the send: one rank's calls stay in order
  check_close(found.request<Tensor>("scale", Tensor::ones({2}), 3.0).get(), Tensor::full({2}, 3.0));
  CHECK(tally->total == 5);  // the very object
  // A call holds the object until it returns, which can be just after its answer arrived here.
  auto held_by = [&](long holders) {
    for (int i = 0; i < 500 && tally.use_count() != holders; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return tally.use_count() == holders;
  };
  CHECK(held_by(2));
  a.stop();
  CHECK(held_by(1));  // the actor let go of it
  CHECK_THAT(thrown<ValueError>([&] { found.request<int64_t>("read").get(); }), Catch::Contains("stopped"));
  thrown<ValueError>([&] { lookup("app.tally"); });
  RemoteActor again = host("app.tally", tally, Method{"read", &Tally::read});  // the name is free again
  CHECK(again.request<int64_t>("read").get() == 5);
}

TEST_CASE("remote actors: a hosted object's unknown method, a taken name or no object is a ValueError", "[net][remote]") {
  auto tally = std::make_shared<Tally>();
  CHECK_THAT(thrown<ValueError>([&] { host("app.tally", tally, Method{"add", &Tally::add}); }),
             Catch::Contains("host: this rank has no RemoteActors"));
  auto world = world_of_one();
  RemoteActors actors(world);
  RemoteActor a = host("app.tally", tally, Method{"add", &Tally::add}, Method{"read", &Tally::read});
  CHECK_THAT(thrown<ValueError>([&] { a.request("fly").get(); }),
             Catch::Contains("remote actor 'app.tally' on rank 0: fly: no such method; it has add, read"));
  CHECK_THAT(thrown<ValueError>([&] { a.request("add", "two").get(); }),
             Catch::Contains("add: argument 1: expected an int, got a string"));
  CHECK_THAT(thrown<ValueError>([&] { host("app.tally", std::make_shared<Tally>(), Method{"add", &Tally::add}); }),
             Catch::Contains("host('app.tally') on rank 0: the name 'app.tally' is taken (by an object hosted on rank 0)"));
  spawn_on(SpawnOptions{.rank = 0, .name = "spawned", .max_restarts = 0}, "test.tally");
  CHECK_THAT(thrown<ValueError>([&] { host("spawned", tally, Method{"add", &Tally::add}); }),
             Catch::Contains("the name 'spawned' is taken (by a test.tally on rank 0)"));
  CHECK_THAT(thrown<ValueError>([&] { spawn_on(SpawnOptions{.rank = 0, .name = "app.tally", .max_restarts = 0}, "test.tally"); }),
             Catch::Contains("the name 'app.tally' is taken (by an object hosted on rank 0)"));
  CHECK_THAT(thrown<ValueError>([&] { host("", tally, Method{"add", &Tally::add}); }), Catch::Contains("needs a name"));
  CHECK_THAT(thrown<ValueError>([&] { host("app.none", std::shared_ptr<Tally>(), Method{"add", &Tally::add}); }),
             Catch::Contains("host('app.none') on rank 0: no object"));
  CHECK(a.request<int64_t>("add", 4).get() == 4);  // the actor goes on
  CHECK(lookup("app.tally").request<int64_t>("read").get() == 4);  // the name still leads to it
}

TEST_CASE("remote actors: ensure() gives a library the program's RemoteActors, or one that libraries share", "[net][remote]") {
  auto world = world_of_one();
  {
    RemoteActors program(world);
    CHECK(RemoteActors::ensure(world) == nullptr);  // the program's serves
  }
  {
    std::shared_ptr<RemoteActors> made = RemoteActors::ensure(world);
    REQUIRE(made != nullptr);
    CHECK(RemoteActors::ensure(world) == made);
    CHECK_THAT(thrown<ValueError>([&] { RemoteActors late(world); }),
               Catch::Contains("has one already, made for a library on a process group (an Executor's): make the "
                               "program's before it"));
    RemoteActor a = host("app.tally", std::make_shared<Tally>(), Method{"add", &Tally::add});  // the free functions use it
    CHECK(lookup("app.tally").request<int64_t>("add", 7).get() == 7);
  }
  std::shared_ptr<RemoteActors> fresh = RemoteActors::ensure(world);  // the last holder closed the first
  REQUIRE(fresh != nullptr);
  thrown<ValueError>([&] { lookup("app.tally"); });
  fresh.reset();
  RemoteActors program(world);  // none left: the program makes its own
  CHECK_THAT(thrown<ValueError>([&] { RemoteActors::ensure(nullptr); }), Catch::Contains("no process group"));
}
