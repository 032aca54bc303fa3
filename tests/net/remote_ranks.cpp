// The ranks of remote_test.cpp: each hidden test case is one rank, started N times by run_ranks
// (tests/support/ranks.h). Rank 0 drives (ranks listed per case drive too); the others serve().
//   troupe launch --nproc 3 -- build/bin/test_net "remote rank: basic"
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "devices/backend.h"
#include "devices/ops.h"
#include "net/remote/remote_actor.h"
#include "support/close.h"
#include "support/elapsed.h"
#include "support/ranks.h"
#include "support/thrown.h"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

int this_rank() { return std::atoi(std::getenv("RANK")); }

struct Config {
  int64_t scale = 1;
  std::string label;
  TROUPE_FIELDS(scale, label)
};

// The actor every scenario spawns: stateless helpers, a log of appended numbers, failures on
// request, a relay to another actor, and ways to block or die.
class Echo {
 public:
  explicit Echo(const Config& config) : config_(config) {}
  Tensor scale(const Tensor& x) { return mul(x, static_cast<double>(config_.scale)); }
  int64_t add(int64_t a, int64_t b) { return a + b; }
  double half(double x) { return x / 2; }
  std::vector<Tensor> swap(const Tensor& a, const Tensor& b) { return {b, a}; }
  Config config() const { return config_; }
  std::string where() const { return config_.label + "@" + std::to_string(this_rank()); }
  void append(int64_t v) { log_.push_back(v); }
  std::vector<int64_t> history() const { return log_; }
  void fail(const std::string& kind) {
    if (kind == "shape") throw ShapeError("bad shape f32[2,3]");
    if (kind == "index") throw IndexError("index 7 out of range");
    throw std::runtime_error("plain failure");
  }
  Tensor relay(const std::string& name, const Tensor& x) {  // an actor calling another actor
    return lookup(name).request<Tensor>("scale", x).get();
  }
  void block(double seconds) { std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); }
  // Whether the file appeared within `seconds` (blocks the actor meanwhile, not on the transport).
  bool wait_for_file(const std::string& path, double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!std::filesystem::exists(path) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(1ms);
    return std::filesystem::exists(path);
  }
  void die() { ::kill(::getpid(), SIGKILL); }

 private:
  Config config_;
  std::vector<int64_t> log_;
};

TROUPE_ACTOR(Echo(const Config&), "test.echo", &Echo::scale, &Echo::add, &Echo::half, &Echo::swap, &Echo::config,
             &Echo::where, &Echo::append, &Echo::history, &Echo::fail, &Echo::relay, &Echo::block, &Echo::die, &Echo::wait_for_file);

struct Fragile {
  explicit Fragile(int64_t x) {
    if (x < 0) throw ShapeError("Fragile: negative size " + std::to_string(x));
  }
  int64_t one() const { return 1; }
};
TROUPE_ACTOR(Fragile(int64_t), "test.fragile", &Fragile::one);

// Spawn, request/response of every kind of value, send, lookup, names, actor-to-actor, stop.
void basic(int size) {
  const Tensor x = Tensor::arange(6, DType::f32).reshape({2, 3});
  const Tensor big = Tensor::full({1 << 20}, 3.0);  // 4 MB: a zero-copy part
  std::vector<RemoteActor> echoes;
  for (int r = 0; r < size; ++r) {
    RemoteActor e = spawn_on(r, "test.echo", Config{r + 2, "e" + std::to_string(r)});
    CHECK(e.name() == "test.echo/" + std::to_string(r));
    CHECK(e.rank() == r);
    CHECK(e.type() == "test.echo");
    const double s = r + 2;
    check_close(e.request<Tensor>("scale", x).get(), mul(x, s));
    check_close(e.request<Tensor>("scale", big).get(), mul(big, s));
    Tensor y = wait(e.request("scale", x));  // untyped: a WireValue, converted
    check_close(y, mul(x, s));
    int64_t five = wait(e.request("add", 2, 3));
    CHECK(five == 5);
    CHECK(e.request<double>("half", 3).get() == 1.5);  // an int argument for a double parameter
    auto swapped = e.request<std::vector<Tensor>>("swap", x, big).get();
    REQUIRE(swapped.size() == 2);
    check_close(swapped[0], big);
    check_close(swapped[1], x);
    Config c = e.request<Config>("config").get();
    CHECK(c.scale == r + 2);
    CHECK(c.label == "e" + std::to_string(r));
    CHECK(e.request<std::string>("where").get() == "e" + std::to_string(r) + "@" + std::to_string(r));
    const Tensor empty = Tensor::zeros({0, 4}, DType::f64);
    check_close(e.request<Tensor>("scale", empty).get(), empty);
    const Tensor ints = Tensor::from_vector<int64_t>({1, -2, 3}, {3});
    check_close(e.request<Tensor>("scale", ints).get(), mul(ints, s));
    e.send("append", 41);
    e.send("append", 42);
    CHECK((e.request<std::vector<int64_t>>("history").get() == std::vector<int64_t>{41, 42}));
    echoes.push_back(e);
  }
  // Names: lookup, an explicit name, a second actor of a type on one rank.
  RemoteActor found = lookup("test.echo/" + std::to_string(size - 1));
  CHECK(found.rank() == size - 1);
  CHECK(found.request<int64_t>("add", 1, 1).get() == 2);
  SpawnOptions named{.rank = size - 1, .name = "named", .max_restarts = 0};
  RemoteActor n = spawn_on(named, "test.echo", Config{10, "n"});
  CHECK(n.name() == "named");
  CHECK(lookup("named").rank() == size - 1);
  RemoteActor second = spawn_on(1, "test.echo", Config{1, "s"});
  CHECK(second.name() == "test.echo/1.1");
  // The actor on rank 1 calls one on another rank (the driver's own, with 2 ranks).
  const int target = size == 2 ? 0 : 2;
  check_close(echoes[1].request<Tensor>("relay", "test.echo/" + std::to_string(target), x).get(),
              mul(x, static_cast<double>(target + 2)));
  // Stop: calls sent before it run; on_down hears of it; later calls fail; the name is free.
  std::atomic<int> downs{0};
  std::exception_ptr why = std::make_exception_ptr(Error("not called"));
  n.on_down([&](std::exception_ptr e) {
    why = e;
    ++downs;
  });
  n.send("append", 7);
  n.stop();
  for (int i = 0; i < 100 && downs == 0; ++i) std::this_thread::sleep_for(10ms);  // the host's notice may run it
  CHECK(downs == 1);
  CHECK(why == nullptr);
  auto m = thrown<ValueError>([&] { n.request<int64_t>("add", 1, 2).get(); });
  CHECK_THAT(m, Catch::Contains("'named'"));
  CHECK_THAT(m, Catch::Contains("stopped"));
  thrown<ValueError>([&] { lookup("named"); });
  RemoteActor again = spawn_on(named, "test.echo", Config{1, "again"});
  CHECK(again.request<std::string>("where").get() == "again@" + std::to_string(size - 1));
}

// Messages from each driver to one actor stay in their order, between requests and sends alike.
void order() {
  const int rank = this_rank();
  RemoteActor log = rank == 0 ? spawn_on(1, "test.echo", Config{1, "log"}) : lookup("test.echo/1", 10s);
  const int64_t base = rank * 1000000;
  std::vector<Future<int64_t>> sums;
  for (int64_t i = 0; i < 3000; ++i) {
    if (i % 10 == 0) sums.push_back(log.request<int64_t>("add", base, i));
    log.send("append", base + i);
  }
  for (size_t k = 0; k < sums.size(); ++k) CHECK(sums[k].get() == base + static_cast<int64_t>(k) * 10);
  std::vector<int64_t> mine;
  for (int64_t v : log.request<std::vector<int64_t>>("history").get())
    if (v / 1000000 == rank) mine.push_back(v);
  CHECK(mine.size() == 3000);
  size_t in_order = 0;  // how many arrived in the order they were sent
  while (in_order < mine.size() && mine[in_order] == base + static_cast<int64_t>(in_order)) ++in_order;
  CHECK(in_order == mine.size());
}

// The serving rank writes the answers of one batch of calls together (Transport::SendBatch). A
// call that blocks in such a batch (here on a file that only appears once the caller has the answer
// before it) must not keep that answer back: it comes while the call still blocks.
void held_answers() {
  RemoteActor echo = spawn_on(1, "test.echo", Config{1, "held"});
  const std::string path = std::filesystem::temp_directory_path() / ("troupe-held-" + std::to_string(::getpid()));
  std::filesystem::remove(path);
  // The first call keeps the serving thread busy while the next two arrive: one batch of two.
  auto busy = echo.request<void>("block", 0.3);
  auto sum = echo.request<int64_t>("add", int64_t{2}, int64_t{3});
  auto seen = echo.request<bool>("wait_for_file", path, 20.0);
  busy.get();
  CHECK(sum.get() == 5);
  std::ofstream(path) << "answered";
  CHECK(seen.get());
  std::filesystem::remove(path);
  // Requests sent while others are unanswered may wait for company; a caller that then waits
  // elsewhere (not on the transport) still has them sent and answered.
  (void)echo.request<int64_t>("add", int64_t{1}, int64_t{1}).get();
  std::vector<Future<void>> appends;
  for (int64_t i = 0; i < 16; ++i) appends.push_back(echo.request<void>("append", i));
  const auto until = std::chrono::steady_clock::now() + 20s;
  auto all_ready = [&] { return std::all_of(appends.begin(), appends.end(), [](const auto& f) { return f.ready(); }); };
  while (!all_ready() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  CHECK(all_ready());
  CHECK(echo.request<std::vector<int64_t>>("history").get().size() == 16);
  // Many pipelined calls, each answer in its place.
  std::vector<Future<int64_t>> sums;
  for (int64_t i = 0; i < 2000; ++i) sums.push_back(echo.request<int64_t>("add", i, int64_t{1}));
  for (int64_t i = 0; i < 2000; ++i) CHECK(sums[static_cast<size_t>(i)].get() == i + 1);
}

// Every error comes back typed, naming the actor, the method and the rank, and fast.
void errors() {
  const auto start = std::chrono::steady_clock::now();
  RemoteActor e = spawn_on(1, "test.echo", Config{2, "x"});
  auto m = thrown<ShapeError>([&] { e.request("fail", "shape").get(); });
  CHECK_THAT(m, Catch::Contains("remote actor 'test.echo/1' on rank 1: fail: bad shape f32[2,3]"));
  m = thrown<IndexError>([&] { e.request("fail", "index").get(); });
  CHECK_THAT(m, Catch::Contains("on rank 1: fail: index 7"));
  m = thrown<Error>([&] { e.request("fail", "plain").get(); });
  CHECK_THAT(m, Catch::Contains("fail: plain failure"));
  m = thrown<ValueError>([&] { e.request("fly").get(); });
  CHECK_THAT(m, Catch::Contains("'test.echo/1' on rank 1: fly: no such method"));
  CHECK_THAT(m, Catch::Contains("scale, add"));
  m = thrown<ValueError>([&] { e.request("scale", "text").get(); });
  CHECK_THAT(m, Catch::Contains("scale: argument 1: expected a tensor, got a string"));
  m = thrown<ValueError>([&] { e.request("add", 1).get(); });
  CHECK_THAT(m, Catch::Contains("add: expected 2 arguments, got 1"));
  m = thrown<ValueError>([&] { e.request<int64_t>("scale", Tensor::ones({2})).get(); });
  CHECK_THAT(m, Catch::Contains("scale: result: expected an int, got a tensor f32[2]"));
  m = thrown<ValueError>([&] { spawn_on(1, "test.nope"); });
  CHECK_THAT(m, Catch::Contains("rank 1 has no actor type 'test.nope'"));
  CHECK_THAT(m, Catch::Contains("test.echo"));
  m = thrown<ShapeError>([&] { spawn_on(1, "test.fragile", -3); });
  CHECK_THAT(m, Catch::Contains("test.fragile on rank 1: Fragile: negative size -3"));
  m = thrown<ValueError>([&] { spawn_on(1, "test.fragile", "x"); });
  CHECK_THAT(m, Catch::Contains("argument 1: expected an int, got a string"));
  spawn_on(SpawnOptions{.rank = 1, .name = "taken", .max_restarts = 0}, "test.fragile", 1);
  m = thrown<ValueError>([&] { spawn_on(SpawnOptions{.rank = 0, .name = "taken", .max_restarts = 0}, "test.fragile", 2); });
  CHECK_THAT(m, Catch::Contains("the name 'taken' is taken (by a test.fragile on rank 1)"));
  thrown<IndexError>([&] { spawn_on(5, "test.echo", Config{}); });
  if (!has_backend(DeviceType::cuda)) {  // a device the rank lacks is refused, saying why
    SpawnOptions on_gpu;  // assigned, not designated: GCC 12 warns of the members a designated list skips
    on_gpu.rank = 1;
    on_gpu.device = Device::cuda(0);
    m = thrown<DeviceError>([&] { spawn_on(on_gpu, "test.echo", Config{}); });
    CHECK_THAT(m, Catch::Contains("test.echo on rank 1") && Catch::Contains("cuda"));
  }
  m = thrown<ValueError>([&] { lookup("missing"); });
  CHECK_THAT(m, Catch::Contains("no actor named 'missing'"));
  CHECK_THAT(m, Catch::Contains("taken"));
  const auto waited = std::chrono::steady_clock::now();
  thrown<ValueError>([&] { lookup("missing", 300ms); });
  CHECK(seconds_since(waited) >= 0.29);
  // A failing send comes back to this rank once the host ran it, before the answer to a request
  // sent after it (both are sent while the actor blocks, so that the failure is not back before
  // that request is made): the next call to the actor throws it, once, instead of being made; the
  // mailbox goes on; another actor on the same rank hears nothing of it.
  RemoteActor other = spawn_on(1, "test.echo", Config{3, "y"});
  auto busy = e.request("block", 0.5);
  e.send("fail", "shape");
  auto after = e.request<int64_t>("add", 1, 1);
  CHECK(after.get() == 2);
  CHECK(other.request<int64_t>("add", 2, 2).get() == 4);
  CHECK_NOTHROW(other.check());
  m = thrown<ShapeError>([&] { e.request<int64_t>("add", 1, 1).get(); });
  CHECK_THAT(m, Catch::Contains("an earlier send(): remote actor 'test.echo/1' on rank 1: fail: bad shape f32[2,3]"));
  CHECK(e.request<int64_t>("add", 1, 2).get() == 3);
  CHECK_NOTHROW(e.check());
  // check() throws it without a call; the first unreported failure is the one kept.
  busy = e.request("block", 0.5);
  e.send("fail", "index");
  e.send("fail", "shape");
  after = e.request<int64_t>("add", 1, 1);
  CHECK(after.get() == 2);
  m = thrown<IndexError>([&] { e.check(); });
  CHECK_THAT(m, Catch::Contains("'test.echo/1' on rank 1: fail: index 7"));
  CHECK_NOTHROW(e.check());
  // An unknown method, sent: the next send() throws it (and is not made).
  busy = e.request("block", 0.5);
  e.send("fly");
  e.send("append", 1);
  auto history = e.request<std::vector<int64_t>>("history");
  CHECK((history.get() == std::vector<int64_t>{1}));
  m = thrown<ValueError>([&] { e.send("append", 2); });
  CHECK_THAT(m, Catch::Contains("an earlier send(): remote actor 'test.echo/1' on rank 1: fly: no such method"));
  CHECK((e.request<std::vector<int64_t>>("history").get() == std::vector<int64_t>{1}));
  // One never thrown is printed when this rank's RemoteActors closes (remote_test.cpp).
  busy = e.request("block", 0.5);
  e.send("fail", "index");
  after = e.request<int64_t>("add", 2, 2);
  CHECK(after.get() == 4);
  CHECK(seconds_since(start) < 10);
}

// Rank 1 dies (kill -9) while a request to it is pending; ranks 0 and 2 go on; an actor with a
// restart policy comes back on rank 2.
void kill_rank() {
  RemoteActor blocked = spawn_on(1, "test.echo", Config{1, "b"});
  RemoteActor killer = spawn_on(1, "test.echo", Config{1, "k"});
  RemoteActor phoenix = spawn_on(SpawnOptions{.rank = 1, .name = "phoenix", .max_restarts = 1}, "test.echo", Config{7, "p"});
  RemoteActor other = spawn_on(2, "test.echo", Config{3, "o"});
  CHECK(phoenix.request<std::string>("where").get() == "p@1");
  std::atomic<bool> down{false};
  std::string down_message;
  blocked.on_down([&](std::exception_ptr why) {
    try {
      std::rethrow_exception(why);
    } catch (const PeerLostError& e) {
      down_message = e.what();
    } catch (...) {
    }
    down = true;
  });
  Future<WireValue> pending = blocked.request("block", 60.0);
  std::this_thread::sleep_for(200ms);
  killer.send("die");
  const auto start = std::chrono::steady_clock::now();
  auto m = thrown<PeerLostError>([&] { pending.get(); });
  const double s = seconds_since(start);
  CHECK(s < 5.0);
  CHECK_THAT(m, Catch::Contains("remote actor 'test.echo/1' on rank 1: block: "));
  CHECK_THAT(m, Catch::Contains("rank 1"));
  for (int i = 0; i < 100 && !down; ++i) std::this_thread::sleep_for(50ms);
  CHECK(down);
  CHECK_THAT(down_message, Catch::Contains("rank 1"));
  thrown<PeerLostError>([&] { blocked.request("add", 1, 2).get(); });
  thrown<PeerLostError>([&] { spawn_on(1, "test.echo", Config{}); });
  CHECK(other.request<int64_t>("add", 1, 2).get() == 3);  // the survivors still talk
  CHECK(phoenix.request<std::string>("where").get() == "p@2");
  CHECK(phoenix.rank() == 2);
  CHECK(lookup("phoenix").rank() == 2);
  check_close(phoenix.request<Tensor>("scale", Tensor::ones({2})).get(), Tensor::full({2}, 7.0));
}

// The other ranks run `troupe serve --load libremote_plugin.so`: only they know test.plugin.
void plugin(int size) {
  for (int r = 1; r < size; ++r)
    CHECK(spawn_on(r, "test.plugin").request<std::string>("where").get() == "plugin@" + std::to_string(r));
  auto m = thrown<ValueError>([&] { spawn_on(0, "test.plugin"); });
  CHECK_THAT(m, Catch::Contains("rank 0 has no actor type 'test.plugin'"));
}

// This rank's part: RemoteActors on the launcher's world; the ranks in `drivers` run drive(size),
// the others serve() until the drivers are done.
template <class Drive>
void remote_rank(Drive&& drive, std::initializer_list<int> drivers = {0}) {
  InitOptions o;
  o.timeout = 30s;
  auto world = init_process_group(o);
  RemoteActors actors(world);
  if (std::find(drivers.begin(), drivers.end(), world->rank()) != drivers.end())
    drive(world->size());
  else
    CHECK_NOTHROW(serve());  // returns once every driver is done
}

}  // namespace

TEST_CASE("remote rank: basic", "[.rank]") { remote_rank(basic); }
// Rank 0 has opened and closed a RemoteActors on a transport of its own first (as a rank of an
// in-place elastic job did on an earlier epoch's group); rank 1 never had one. Frames carry the
// number of the RemoteActors on their transport, so the two still hear each other.
TEST_CASE("remote rank: a second RemoteActors on a new transport", "[.rank]") {
  InitOptions o;
  o.timeout = 30s;
  auto world = init_process_group(o);
  if (world->rank() == 0) RemoteActors earlier(world_of_one());
  RemoteActors actors(world);
  if (world->rank() == 0)
    basic(world->size());
  else
    CHECK_NOTHROW(serve());
}
TEST_CASE("remote rank: order", "[.rank]") { remote_rank([](int) { order(); }, {0, 2}); }  // two drivers
TEST_CASE("remote rank: errors", "[.rank]") { remote_rank([](int) { errors(); }); }
TEST_CASE("remote rank: kill", "[.rank]") { remote_rank([](int) { kill_rank(); }); }
TEST_CASE("remote rank: plugin", "[.rank]") { remote_rank(plugin); }
TEST_CASE("remote rank: held answers", "[.rank]") { remote_rank([](int) { held_answers(); }); }
