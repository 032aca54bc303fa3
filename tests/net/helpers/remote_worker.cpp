// One rank of the multi-process remote actor tests: `remote_worker SCENARIO`, started by the
// launcher. Rank 0 drives (ranks listed per scenario drive too); the others serve(). Exits 0 when
// every check passed; prints each failed check to stderr and exits 1. The tests look for lines
// starting with "ok ".
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "devices/ops.h"
#include "net/remote/remote_actor.h"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

int failures = 0;

#define EXPECT(cond)                                                               \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::cerr << "check failed at line " << __LINE__ << ": " #cond << std::endl; \
      ++failures;                                                                  \
    }                                                                              \
  } while (0)

template <class E, class F>
std::string thrown(F&& f, const char* what) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    std::cerr << what << ": wrong exception: " << e.what() << std::endl;
    ++failures;
    return "";
  }
  std::cerr << what << ": no exception" << std::endl;
  ++failures;
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  const bool found = s.find(part) != std::string::npos;
  if (!found) std::cerr << "'" << s << "' lacks '" << part << "'" << std::endl;
  return found;
}

bool same(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  return a.to(DType::f64).to_vector<double>() == b.to(DType::f64).to_vector<double>();
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

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
  void die() { ::kill(::getpid(), SIGKILL); }

 private:
  Config config_;
  std::vector<int64_t> log_;
};

TROUPE_ACTOR(Echo(const Config&), "test.echo", &Echo::scale, &Echo::add, &Echo::half, &Echo::swap, &Echo::config,
             &Echo::where, &Echo::append, &Echo::history, &Echo::fail, &Echo::relay, &Echo::block, &Echo::die);

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
    EXPECT(e.name() == "test.echo/" + std::to_string(r));
    EXPECT(e.rank() == r && e.type() == "test.echo");
    const double s = r + 2;
    EXPECT(same(e.request<Tensor>("scale", x).get(), mul(x, s)));
    EXPECT(same(e.request<Tensor>("scale", big).get(), mul(big, s)));
    Tensor y = wait(e.request("scale", x));  // untyped: a Value, converted
    EXPECT(same(y, mul(x, s)));
    int64_t five = wait(e.request("add", 2, 3));
    EXPECT(five == 5);
    EXPECT(e.request<double>("half", 3).get() == 1.5);  // an int argument for a double parameter
    auto swapped = e.request<std::vector<Tensor>>("swap", x, big).get();
    EXPECT(swapped.size() == 2 && same(swapped[0], big) && same(swapped[1], x));
    Config c = e.request<Config>("config").get();
    EXPECT(c.scale == r + 2 && c.label == "e" + std::to_string(r));
    EXPECT(e.request<std::string>("where").get() == "e" + std::to_string(r) + "@" + std::to_string(r));
    const Tensor empty = Tensor::zeros({0, 4}, DType::f64);
    EXPECT(same(e.request<Tensor>("scale", empty).get(), empty));
    const Tensor ints = Tensor::from_vector<int64_t>({1, -2, 3}, {3});
    EXPECT(same(e.request<Tensor>("scale", ints).get(), mul(ints, s)));
    e.send("append", 41);
    e.send("append", 42);
    EXPECT((e.request<std::vector<int64_t>>("history").get() == std::vector<int64_t>{41, 42}));
    echoes.push_back(e);
  }
  // Names: lookup, an explicit name, a second actor of a type on one rank.
  RemoteActor found = lookup("test.echo/" + std::to_string(size - 1));
  EXPECT(found.rank() == size - 1);
  EXPECT(found.request<int64_t>("add", 1, 1).get() == 2);
  SpawnOptions named{.rank = size - 1, .name = "named", .max_restarts = 0};
  RemoteActor n = spawn_on(named, "test.echo", Config{10, "n"});
  EXPECT(n.name() == "named" && lookup("named").rank() == size - 1);
  RemoteActor second = spawn_on(1, "test.echo", Config{1, "s"});
  EXPECT(second.name() == "test.echo/1.1");
  // The actor on rank 1 calls one on another rank (the driver's own, with 2 ranks).
  const int target = size == 2 ? 0 : 2;
  EXPECT(same(echoes[1].request<Tensor>("relay", "test.echo/" + std::to_string(target), x).get(),
              mul(x, static_cast<double>(target + 2))));
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
  EXPECT(downs == 1 && why == nullptr);
  auto m = thrown<ValueError>([&] { n.request<int64_t>("add", 1, 2).get(); }, "call after stop");
  EXPECT(contains(m, "'named'") && contains(m, "stopped"));
  thrown<ValueError>([&] { lookup("named"); }, "lookup after stop");
  RemoteActor again = spawn_on(named, "test.echo", Config{1, "again"});
  EXPECT(again.request<std::string>("where").get() == "again@" + std::to_string(size - 1));
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
  for (size_t k = 0; k < sums.size(); ++k) EXPECT(sums[k].get() == base + static_cast<int64_t>(k) * 10);
  std::vector<int64_t> mine;
  for (int64_t v : log.request<std::vector<int64_t>>("history").get())
    if (v / 1000000 == rank) mine.push_back(v);
  EXPECT(mine.size() == 3000);
  for (size_t i = 0; i < mine.size(); ++i)
    if (mine[i] != base + static_cast<int64_t>(i)) {
      EXPECT(mine[i] == base + static_cast<int64_t>(i));
      break;
    }
}

// Every error comes back typed, naming the actor, the method and the rank, and fast.
void errors() {
  const auto start = std::chrono::steady_clock::now();
  RemoteActor e = spawn_on(1, "test.echo", Config{2, "x"});
  auto m = thrown<ShapeError>([&] { e.request("fail", "shape").get(); }, "ShapeError");
  EXPECT(contains(m, "remote actor 'test.echo/1' on rank 1: fail: bad shape f32[2,3]"));
  m = thrown<IndexError>([&] { e.request("fail", "index").get(); }, "IndexError");
  EXPECT(contains(m, "on rank 1: fail: index 7"));
  m = thrown<Error>([&] { e.request("fail", "plain").get(); }, "std::runtime_error");
  EXPECT(contains(m, "fail: plain failure"));
  m = thrown<ValueError>([&] { e.request("fly").get(); }, "unknown method");
  EXPECT(contains(m, "'test.echo/1' on rank 1: fly: no such method") && contains(m, "scale, add"));
  m = thrown<ValueError>([&] { e.request("scale", "text").get(); }, "bad argument");
  EXPECT(contains(m, "scale: argument 1: expected a tensor, got a string"));
  m = thrown<ValueError>([&] { e.request("add", 1).get(); }, "argument count");
  EXPECT(contains(m, "add: expected 2 arguments, got 1"));
  m = thrown<ValueError>([&] { e.request<int64_t>("scale", Tensor::ones({2})).get(); }, "result type");
  EXPECT(contains(m, "scale: result: expected an int, got a tensor f32[2]"));
  m = thrown<ValueError>([&] { spawn_on(1, "test.nope"); }, "unknown type");
  EXPECT(contains(m, "rank 1 has no actor type 'test.nope'") && contains(m, "test.echo"));
  m = thrown<ShapeError>([&] { spawn_on(1, "test.fragile", -3); }, "constructor error");
  EXPECT(contains(m, "test.fragile on rank 1: Fragile: negative size -3"));
  m = thrown<ValueError>([&] { spawn_on(1, "test.fragile", "x"); }, "constructor argument");
  EXPECT(contains(m, "argument 1: expected an int, got a string"));
  spawn_on(SpawnOptions{.rank = 1, .name = "taken", .max_restarts = 0}, "test.fragile", 1);
  m = thrown<ValueError>([&] { spawn_on(SpawnOptions{.rank = 0, .name = "taken", .max_restarts = 0}, "test.fragile", 2); },
                         "name taken");
  EXPECT(contains(m, "the name 'taken' is taken (by a test.fragile on rank 1)"));
  thrown<IndexError>([&] { spawn_on(5, "test.echo", Config{}); }, "rank out of range");
  m = thrown<ValueError>([&] { lookup("missing"); }, "unknown name");
  EXPECT(contains(m, "no actor named 'missing'") && contains(m, "taken"));
  const auto waited = std::chrono::steady_clock::now();
  thrown<ValueError>([&] { lookup("missing", 300ms); }, "unknown name, waited for");
  EXPECT(seconds_since(waited) >= 0.29);
  // A failing send is reported on its host; the mailbox goes on.
  e.send("fail", "shape");
  EXPECT(e.request<int64_t>("add", 1, 1).get() == 2);
  EXPECT(seconds_since(start) < 10);
}

// Rank 1 dies (kill -9) while a request to it is pending; ranks 0 and 2 go on; an actor with a
// restart policy comes back on rank 2.
void kill_rank() {
  RemoteActor blocked = spawn_on(1, "test.echo", Config{1, "b"});
  RemoteActor killer = spawn_on(1, "test.echo", Config{1, "k"});
  RemoteActor phoenix = spawn_on(SpawnOptions{.rank = 1, .name = "phoenix", .max_restarts = 1}, "test.echo", Config{7, "p"});
  RemoteActor other = spawn_on(2, "test.echo", Config{3, "o"});
  EXPECT(phoenix.request<std::string>("where").get() == "p@1");
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
  Future<Value> pending = blocked.request("block", 60.0);
  std::this_thread::sleep_for(200ms);
  killer.send("die");
  const auto start = std::chrono::steady_clock::now();
  auto m = thrown<PeerLostError>([&] { pending.get(); }, "pending request to the dead rank");
  const double s = seconds_since(start);
  EXPECT(s < 5.0);
  EXPECT(contains(m, "remote actor 'test.echo/1' on rank 1: block: ") && contains(m, "rank 1"));
  for (int i = 0; i < 100 && !down; ++i) std::this_thread::sleep_for(50ms);
  EXPECT(down && contains(down_message, "rank 1"));
  thrown<PeerLostError>([&] { blocked.request("add", 1, 2).get(); }, "request after the loss");
  thrown<PeerLostError>([&] { spawn_on(1, "test.echo", Config{}); }, "spawn on the dead rank");
  EXPECT(other.request<int64_t>("add", 1, 2).get() == 3);  // the survivors still talk
  EXPECT(phoenix.request<std::string>("where").get() == "p@2");
  EXPECT(phoenix.rank() == 2 && lookup("phoenix").rank() == 2);
  EXPECT(same(phoenix.request<Tensor>("scale", Tensor::ones({2})).get(), Tensor::full({2}, 7.0)));
  std::cout << "ok dead rank detected in " << s << " s" << std::endl;
}

// The other ranks run `troupe serve --load libremote_plugin.so`: only they know test.plugin.
void plugin(int size) {
  for (int r = 1; r < size; ++r)
    EXPECT(spawn_on(r, "test.plugin").request<std::string>("where").get() == "plugin@" + std::to_string(r));
  auto m = thrown<ValueError>([&] { spawn_on(0, "test.plugin"); }, "a type this rank lacks");
  EXPECT(contains(m, "rank 0 has no actor type 'test.plugin'"));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: remote_worker basic|order|errors|kill|plugin\n";
    return 2;
  }
  const std::string scenario = argv[1];
  try {
    InitOptions o;
    o.timeout = 30s;
    auto world = init_process_group(o);
    const int rank = world->rank(), size = world->size();
    {
      RemoteActors actors(world);
      const bool drives = rank == 0 || (scenario == "order" && rank == 2);
      if (!drives) {
        serve();
      } else if (scenario == "basic") {
        basic(size);
      } else if (scenario == "order") {
        order();
      } else if (scenario == "errors") {
        errors();
      } else if (scenario == "kill") {
        kill_rank();
      } else if (scenario == "plugin") {
        plugin(size);
      } else {
        std::cerr << "unknown scenario " << scenario << "\n";
        return 2;
      }
    }
    if (failures == 0) std::cout << "ok " << scenario << " rank " << rank << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "uncaught: " << e.what() << std::endl;
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
