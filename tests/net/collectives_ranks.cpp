// The ranks of collectives_test.cpp: each hidden test case is one rank, started N times by
// run_ranks (tests/support/ranks.h). Every rank computes every other rank's inputs (they depend
// only on rank and index), so each checks its results locally.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "devices/threads.h"
#include "net/collectives.h"
#include "net/collectives/all_reduce.h"
#include "net/collectives/group_state.h"
#include "net/collectives/host_groups.h"
#include "net/collectives/shm_all_reduce.h"
#include "net/process_group.h"
#include "net/transport.h"
#include "net/seed_ring_all_reduce.h"
#include "support/close.h"
#include "support/thrown.h"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

// Rank r's input: small integers (1..3, exact in every dtype, even as a product of 4 ranks).
std::vector<double> values(int rank, int64_t n, int salt = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 1 + (rank + i + salt) % 3;
  return v;
}

Tensor input(int rank, const Shape& shape, DType dtype, int salt = 0) {
  return Tensor::from_vector<double>(values(rank, numel(shape), salt), shape).to(dtype);
}

double combine(double a, double b, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return a + b;
    case ReduceOp::product: return a * b;
    case ReduceOp::max: return std::max(a, b);
    case ReduceOp::min: return std::min(a, b);
    case ReduceOp::none: break;
  }
  return 0;
}

// The reduction over ranks of input(r, shape, dtype), computed here in double.
Tensor expected(int ranks, const Shape& shape, DType dtype, ReduceOp op, int salt = 0) {
  std::vector<double> acc = values(0, numel(shape), salt);
  for (int r = 1; r < ranks; ++r) {
    const std::vector<double> v = values(r, numel(shape), salt);
    for (size_t i = 0; i < acc.size(); ++i) acc[i] = combine(acc[i], v[i], op);
  }
  if (op == ReduceOp::avg)
    for (double& x : acc) x /= ranks;
  if (dtype == DType::boolean)
    for (double& x : acc) x = x != 0;
  return Tensor::from_vector<double>(acc, shape).to(dtype);
}

// Integers exactly; floats within 1e-6 (f16, bf16: 1e-2) of the reference, relative above 1.
void check_reduced(const Tensor& got, const Tensor& want) {
  const double tolerance = want.dtype() == DType::f16 || want.dtype() == DType::bf16 ? 1e-2 : 1e-6;
  check_close(got, want, {.rtol = tolerance, .atol = tolerance});
}

const DType kNumeric[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8};
const ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::product, ReduceOp::max, ReduceOp::min, ReduceOp::avg};

void reductions(ProcessGroup& g) {
  const int r = g.rank(), n = g.size();
  // Small shapes (recursive doubling, binomial trees) for every dtype and op.
  for (DType dtype : kNumeric)
    for (ReduceOp op : kOps) {
      if (op == ReduceOp::avg && !is_floating(dtype)) continue;
      const Shape shape{2, 3};
      Tensor t = input(r, shape, dtype);
      const Tensor mine = t;
      all_reduce(g, t, op);
      check_reduced(t, expected(n, shape, dtype, op));
      check_reduced(mine, input(r, shape, dtype));  // the caller's old bytes are untouched
      for (int root = 0; root < n; root += std::max(1, n - 1)) {
        Tensor x = input(r, shape, dtype);
        reduce(g, x, root, op);
        check_reduced(x, r == root ? expected(n, shape, dtype, op) : input(r, shape, dtype));
      }
      std::vector<Tensor> parts;
      for (int d = 0; d < n; ++d) parts.push_back(input(r, {3}, dtype, d));
      Tensor out;
      reduce_scatter(g, out, parts, op);
      check_reduced(out, expected(n, {3}, dtype, op, r));
    }
  for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
    Tensor b = Tensor::from_vector<bool>({r == 0, true, false}, {3});
    all_reduce(g, b, op);
    CHECK(b.to_vector<bool>() == std::vector<bool>({op == ReduceOp::max, true, false}));
  }
  // A 0-d tensor, an empty one.
  Tensor s = Tensor::scalar<float>(static_cast<float>(r + 1));
  all_reduce(g, s, ReduceOp::sum);
  CHECK((s.dim() == 0 && s.item<float>() == n * (n + 1) / 2.0f));
  Tensor e = Tensor::zeros({0, 4});
  all_reduce(g, e);
  CHECK(e.shape() == Shape({0, 4}));
  // Large: the ring (the pair exchange on 2 ranks), several chunks per segment (f32: 1 MiB chunks,
  // more than the send window) and a short last one, f16 and bf16 through f32, avg, and a strided
  // input; through shared memory, several 16 MiB pieces.
  for (auto [count, dtype, op] : {std::tuple{int64_t(40000), DType::f32, ReduceOp::sum},
                                  std::tuple{int64_t(700001), DType::f32, ReduceOp::sum},
                                  std::tuple{int64_t(5000001), DType::f32, ReduceOp::sum},  // 20 MB: > 4 chunks, 2 pieces
                                  std::tuple{int64_t(300000), DType::f16, ReduceOp::max},
                                  std::tuple{int64_t(300000), DType::bf16, ReduceOp::sum},
                                  std::tuple{int64_t(200000), DType::f64, ReduceOp::avg},
                                  std::tuple{int64_t(1500001), DType::bf16, ReduceOp::avg},
                                  std::tuple{int64_t(100000), DType::i64, ReduceOp::product}}) {
    Tensor t = input(r, {count}, dtype);
    all_reduce(g, t, op);
    check_reduced(t, expected(n, {count}, dtype, op));
  }
  // Inexact sums: every rank must still end with the same bits (rank 0's, broadcast).
  std::vector<float> fractions(3'000'001);
  for (size_t i = 0; i < fractions.size(); ++i)
    fractions[i] = 0.1f * static_cast<float>((i * 7 + r * 13) % 101) + 1e-3f * r;
  Tensor mixed = Tensor::from_vector(fractions, {static_cast<int64_t>(fractions.size())});
  all_reduce(g, mixed, ReduceOp::sum);
  Tensor rank0 = mixed.clone();
  broadcast(g, rank0, 0);
  CHECK(std::memcmp(rank0.raw_data(), mixed.raw_data(), mixed.nbytes()) == 0);
  Tensor wide = input(r, {300, 400}, DType::f32).transpose(0, 1);
  all_reduce(g, wide, ReduceOp::sum);
  check_reduced(wide, expected(n, {300, 400}, DType::f32, ReduceOp::sum).transpose(0, 1).contiguous());
}

void movers(ProcessGroup& g) {
  const int r = g.rank(), n = g.size();
  for (DType dtype : {DType::f32, DType::i64, DType::boolean, DType::bf16}) {
    for (int root = 0; root < n; ++root) {
      Tensor t = r == root ? input(root, {4, 2}, dtype, 1) : Tensor::zeros({4, 2}, dtype);
      broadcast(g, t, root);
      check_reduced(t, input(root, {4, 2}, dtype, 1));

      std::vector<Tensor> parts;
      if (r == root)
        for (int d = 0; d < n; ++d) parts.push_back(input(d, {5}, dtype, root));
      Tensor out = Tensor::zeros({5}, dtype);
      scatter(g, out, parts, root);
      check_reduced(out, input(r, {5}, dtype, root));

      std::vector<Tensor> gathered;
      gather(g, gathered, input(r, {2, 2}, dtype, root), root);
      CHECK(gathered.size() == (r == root ? static_cast<size_t>(n) : 0u));
      for (size_t s = 0; s < gathered.size(); ++s) check_reduced(gathered[s], input(static_cast<int>(s), {2, 2}, dtype, root));
    }
    std::vector<Tensor> all(static_cast<size_t>(n));
    all_gather(g, all, input(r, {3}, dtype, 7));
    CHECK(all.size() == static_cast<size_t>(n));
    for (int s = 0; s < n && s < static_cast<int>(all.size()); ++s) check_reduced(all[static_cast<size_t>(s)], input(s, {3}, dtype, 7));

    // all_to_all with a different size for every pair: rank s sends rank d s+d+1 elements.
    std::vector<Tensor> outgoing, incoming;
    for (int d = 0; d < n; ++d) outgoing.push_back(input(r, {r + d + 1}, dtype, d));
    all_to_all(g, incoming, outgoing);
    CHECK(incoming.size() == static_cast<size_t>(n));
    for (int s = 0; s < n && s < static_cast<int>(incoming.size()); ++s)
      check_reduced(incoming[static_cast<size_t>(s)], input(s, {s + r + 1}, dtype, r));
  }
  // Large broadcast and all_gather (zero-copy payloads).
  Tensor big = r == 0 ? input(0, {500000}, DType::f32) : Tensor::zeros({500000});
  broadcast(g, big, 0);
  check_reduced(big, input(0, {500000}, DType::f32));
  barrier(g);
}

void async_and_groups(ProcessGroup& world) {
  const int r = world.rank(), n = world.size();
  // Several async collectives in flight, then blocking ones, waited in reverse order.
  Tensor a = input(r, {1000}, DType::f32), b = input(r, {200000}, DType::f32), c = input(r, {7}, DType::i32);
  std::vector<Tensor> all;
  Work wa = all_reduce_async(world, a, ReduceOp::sum);
  Work wb = all_reduce_async(world, b, ReduceOp::max);
  Work wc = broadcast_async(world, c, n - 1);
  Work wg = all_gather_async(world, all, input(r, {2}, DType::f64));
  Work wbar = barrier_async(world);
  Tensor d = input(r, {3}, DType::f64);
  all_reduce(world, d, ReduceOp::min);  // a blocking call between async ones
  check_reduced(d, expected(n, {3}, DType::f64, ReduceOp::min));
  wbar.wait();
  wg.wait();
  wc.wait();
  wb.wait();
  wa.wait();
  CHECK((wa.is_completed() && wb.is_completed()));
  check_reduced(a, expected(n, {1000}, DType::f32, ReduceOp::sum));
  check_reduced(b, expected(n, {200000}, DType::f32, ReduceOp::max));
  check_reduced(c, input(n - 1, {7}, DType::i32));
  CHECK(all.size() == static_cast<size_t>(n));
  for (int s = 0; s < n && s < static_cast<int>(all.size()); ++s) check_reduced(all[static_cast<size_t>(s)], input(s, {2}, DType::f64));
  {
    Tensor out;
    std::vector<Tensor> parts;
    for (int dst = 0; dst < n; ++dst) parts.push_back(input(r, {4}, DType::f32, dst));
    Work w = reduce_scatter_async(world, out, parts, ReduceOp::avg);
    w.wait();
    check_reduced(out, expected(n, {4}, DType::f32, ReduceOp::avg, r));
  }

  // A sub-group (every other rank) all-reduces while the world does too, concurrently: the
  // world's call is async and in flight across the sub-group's.
  std::vector<int> evens;
  for (int s = 0; s < n; s += 2) evens.push_back(s);
  auto sub = world.new_group(evens);
  Tensor w = input(r, {100000}, DType::f32);
  Work ww = all_reduce_async(world, w, ReduceOp::sum);
  if (sub) {
    Tensor x = Tensor::full({100000}, 1.0 + r);
    for (int i = 0; i < 3; ++i) all_reduce(*sub, x, ReduceOp::sum);
    double want = 0;
    for (int s : evens) want += 1.0 + s;
    want *= std::pow(static_cast<double>(sub->size()), 2);
    check_reduced(x, Tensor::full({100000}, want));
    Tensor y = Tensor::scalar<int64_t>(r);
    broadcast(*sub, y, sub->size() - 1);
    CHECK(y.item<int64_t>() == evens.back());
  }
  ww.wait();
  check_reduced(w, expected(n, {100000}, DType::f32, ReduceOp::sum));
  barrier(world);
}

// An all_reduce is set up once per (group, count, dtype, op) and reused: repeated calls of one
// shape, blocking or async, run the same object; another count, dtype or op gets another; a
// group's algorithms go with the group. Results stay exact when a call's input is the previous
// call's result.
void algorithm_cache(ProcessGroup& world) {
  using collectives::AllReduce;
  using collectives::GroupState;
  const int r = world.rank(), n = world.size();
  GroupState& state = GroupState::of(world);
  for (int64_t count : {int64_t(1234), int64_t(300001)}) {  // recursive doubling; pair, ring or shared memory
    Tensor t = input(r, {count}, DType::i64);
    all_reduce(world, t, ReduceOp::sum);
    const std::shared_ptr<AllReduce> first = state.all_reduce(count, DType::i64, ReduceOp::sum);
    CHECK(first->runs() == 1);
    std::vector<int64_t> want = expected(n, {count}, DType::i64, ReduceOp::sum).to_vector<int64_t>();
    CHECK(t.to_vector<int64_t>() == want);
    auto times_n = [&] {
      for (int64_t& v : want) v *= n;
    };
    for (int i = 0; i < 3; ++i) {  // each call's input is the previous call's result
      all_reduce(world, t, ReduceOp::sum);
      times_n();
      CHECK(t.to_vector<int64_t>() == want);
    }
    Work w = all_reduce_async(world, t, ReduceOp::sum);
    w.wait();
    times_n();
    CHECK(t.to_vector<int64_t>() == want);
    CHECK(state.all_reduce(count, DType::i64, ReduceOp::sum) == first);
    CHECK(first->runs() == 5);
    // Shared memory when every rank is on this host (and TROUPE_SHM is not 0), else by size.
    CHECK(std::string(first->name()) == (collectives::SharedMemoryAllReduce::eligible(world) ? "shared_memory"
                                         : count < 100000                                     ? "recursive_doubling"
                                         : n == 2                                             ? "pair"
                                                                                              : "ring"));
  }
  const size_t cached = state.cached_algorithms();
  Tensor other = input(r, {1235}, DType::i64);
  all_reduce(world, other, ReduceOp::sum);
  check_reduced(other, expected(n, {1235}, DType::i64, ReduceOp::sum));
  CHECK(state.cached_algorithms() == cached + 1);
  CHECK(state.all_reduce(1235, DType::i64, ReduceOp::sum) != state.all_reduce(1234, DType::i64, ReduceOp::sum));
  CHECK(state.all_reduce(1234, DType::i64, ReduceOp::max) != state.all_reduce(1234, DType::i64, ReduceOp::sum));
  CHECK(state.all_reduce(1234, DType::i32, ReduceOp::sum) != state.all_reduce(1234, DType::i64, ReduceOp::sum));

  // Every rank makes the group; its algorithms die with it.
  std::vector<int> everyone(static_cast<size_t>(n));
  for (int s = 0; s < n; ++s) everyone[static_cast<size_t>(s)] = s;
  std::shared_ptr<ProcessGroup> sub = world.new_group(everyone);
  Tensor x = input(r, {300001}, DType::f32);
  all_reduce(*sub, x, ReduceOp::sum);
  check_reduced(x, expected(n, {300001}, DType::f32, ReduceOp::sum));
  std::weak_ptr<AllReduce> sub_algorithm = GroupState::of(*sub).all_reduce(300001, DType::f32, ReduceOp::sum);
  CHECK(sub_algorithm.lock()->runs() == 1);
  sub.reset();
  CHECK(sub_algorithm.expired());
  check_reduced(x, expected(n, {300001}, DType::f32, ReduceOp::sum));  // the result outlives its algorithm
  barrier(world);
}

// The distributed tutorial's p2p ring gives the library's sums (any length, any rank count).
void seed_ring(ProcessGroup& g) {
  for (int64_t count : {1, 7, 10001}) {
    Tensor t = input(g.rank(), {count}, DType::f32);
    seed_ring_all_reduce(g, t);
    check_reduced(t, expected(g.size(), {count}, DType::f32, ReduceOp::sum));
  }
  Tensor m = input(g.rank(), {3, 5}, DType::i64);
  seed_ring_all_reduce(g, m);
  check_reduced(m, expected(g.size(), {3, 5}, DType::i64, ReduceOp::sum));
}

// This rank's world, by env:// (the launcher sets it).
std::shared_ptr<ProcessGroup> launched_world() {
  InitOptions o;
  o.timeout = 20s;
  return init_process_group(o);
}

}  // namespace

TEST_CASE("collectives rank: all", "[.rank]") {
  auto world = launched_world();
  // Every rank of these runs is on this machine (one host, or namespaces of it): a 10 ms
  // small-collective poll only while they fit its CPUs.
  CHECK(world->transport().small_collective_poll() == net::small_collective_poll_for(world->size(), hardware_cores()));
  reductions(*world);
  seed_ring(*world);
  movers(*world);
  async_and_groups(*world);
  algorithm_cache(*world);
}

// Ranks on several hosts, several on some (the cluster test sets TROUPE_TEST_HOSTS to each rank's
// host, "0,0,1"): the group sees those hosts, all_reduce and broadcast take two levels, and every
// collective gives what it gives on one host.
TEST_CASE("collectives rank: two levels", "[.rank]") {
  auto world = launched_world();
  std::vector<int> expected_host;
  for (const char* c = std::getenv("TROUPE_TEST_HOSTS"); c && *c; ++c)
    if (*c != ',') expected_host.push_back(*c - '0');
  REQUIRE(expected_host.size() == static_cast<size_t>(world->size()));
  const collectives::HostGroups& hosts = collectives::GroupState::of(*world).host_groups();
  // Hosts are numbered by their lowest rank: renumber the expectation the same way.
  std::vector<int> renumbered(expected_host.size()), first_seen;
  for (size_t r = 0; r < expected_host.size(); ++r) {
    auto it = std::find(first_seen.begin(), first_seen.end(), expected_host[r]);
    if (it == first_seen.end()) it = first_seen.insert(first_seen.end(), expected_host[r]);
    renumbered[r] = static_cast<int>(it - first_seen.begin());
  }
  CHECK(hosts.host_of == renumbered);
  CHECK(hosts.two_level);
  CHECK(hosts.local->size() == static_cast<int>(std::count(renumbered.begin(), renumbered.end(), renumbered[world->rank()])));
  CHECK((hosts.leaders != nullptr) == (std::find(renumbered.begin(), renumbered.end(), renumbered[world->rank()]) -
                                           renumbered.begin() == world->rank()));
  reductions(*world);
  movers(*world);
  async_and_groups(*world);
}

// Rank 1 dies by SIGKILL while the others are inside a large all_reduce, or (TROUPE_TEST_SMALL set)
// in a loop of small async ones, as DDP's gradient buckets are.
TEST_CASE("collectives rank: kill", "[.rank]") {
  auto group = launched_world();
  ProcessGroup& world = *group;
  barrier(world);
  if (world.rank() == 1) {
    std::this_thread::sleep_for(300ms);
    ::kill(::getpid(), SIGKILL);
  }
  const auto start = std::chrono::steady_clock::now();
  const std::string m = thrown<PeerLostError>([&] {
    if (std::getenv("TROUPE_TEST_SMALL")) {
      Tensor t = Tensor::ones({256});
      for (;;) all_reduce_async(world, t, ReduceOp::avg, 60s).wait();
    }
    Tensor t = Tensor::ones({4 << 20});
    all_reduce(world, t, ReduceOp::sum, 60s);
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK_THAT(m, Catch::Contains("rank 1"));
  CHECK(s < 5.0);
  // Stay until the other survivor has seen the death too; leaving first would fail it with
  // "rank R has shut down" if it was waiting on this rank.
  std::this_thread::sleep_for(2s);
}

// Every rank all-reduces until the transport fails: the cluster test pulls rank 1's host's cable
// meanwhile. The survivors must hear of rank 1 within 5 s of the call it broke.
TEST_CASE("collectives rank: link down", "[.rank]") {
  auto group = launched_world();
  ProcessGroup& world = *group;
  barrier(world);
  if (const char* under_way = std::getenv("TROUPE_TEST_UNDER_WAY_FILE"); under_way && world.rank() == 0)
    std::fclose(std::fopen(under_way, "w"));  // the test cuts the cable from now on
  Tensor t = Tensor::ones({1 << 20});
  double call_s = 0;
  const std::string m = thrown<PeerLostError>([&] {
    for (;;) {
      const auto start = std::chrono::steady_clock::now();
      try {
        all_reduce(world, t, ReduceOp::avg, 60s);
      } catch (...) {
        call_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        throw;
      }
    }
  });
  INFO(m);
  CHECK(call_s < 5.0);
  if (world.rank() != 1) CHECK_THAT(m, Catch::Contains("rank 1"));
  // Stay until the other survivor has seen it too: leaving first would fail that one with "rank R
  // has shut down" instead.
  std::this_thread::sleep_for(5s);
}

// Each case: rank 0 (or the last rank) calls something else; every rank must get CommError
// naming both calls. The sequence numbers stay aligned (each rank makes one call per case).
TEST_CASE("collectives rank: mismatch", "[.rank]") {
  auto group = launched_world();
  ProcessGroup& world = *group;
  const int r = world.rank(), n = world.size();
  const bool odd_one = r == n - 1;
  auto check = [&](const std::string& what, const std::vector<std::string>& parts, auto&& call) {
    INFO(what);
    const std::string m = thrown<CommError>(call);
    for (const auto& p : parts) CHECK_THAT(m, Catch::Contains(p));
  };
  check("op", {"all_reduce(sum, f32, 4 elements)", "all_reduce(max, f32, 4 elements)", "disagree"}, [&] {
    Tensor t = Tensor::ones({4});
    all_reduce(world, t, odd_one ? ReduceOp::max : ReduceOp::sum);
  });
  check("dtype", {"all_reduce(sum, f32, 4 elements)", "all_reduce(sum, f64, 4 elements)"}, [&] {
    Tensor t = Tensor::ones({4}, odd_one ? DType::f64 : DType::f32);
    all_reduce(world, t);
  });
  check("count", {"all_reduce(sum, f32, 300000 elements)", "all_reduce(sum, f32, 300001 elements)"}, [&] {
    Tensor t = Tensor::ones({odd_one ? 300001 : 300000});
    all_reduce(world, t);
  });
  check("root", {"broadcast(root 0, f32, 4 elements)", "broadcast(root 1, f32, 4 elements)"}, [&] {
    Tensor t = Tensor::ones({4});
    broadcast(world, t, odd_one ? 1 : 0);
  });
  // Order: the odd one calls broadcast then all_reduce, the others all_reduce then broadcast.
  for (int i = 0; i < 2; ++i)
    check("order", {"all_reduce(sum, f32, 4 elements)", "broadcast(root 0, f32, 4 elements)"}, [&] {
      Tensor t = Tensor::ones({4});
      if ((i == 0) != odd_one) all_reduce(world, t);
      else broadcast(world, t, 0);
    });
  check("rooted", {"gather(root 0, f32, 4 elements)", "scatter(root 0, f32, 4 elements)"}, [&] {
    Tensor t = Tensor::ones({4});
    std::vector<Tensor> parts(static_cast<size_t>(n), Tensor::ones({4}));
    if (odd_one) scatter(world, t, parts, 0);
    else gather(world, parts, t, 0);
  });
  // Still in step afterwards.
  Tensor t = Tensor::ones({4});
  all_reduce(world, t);
  CHECK(t.to_vector<float>() == std::vector<float>(4, static_cast<float>(n)));
  barrier(world);
}

// A per-call timeout: rank 0 gives up on a barrier that rank 1 joins late; rank 1 then hears of it.
TEST_CASE("collectives rank: timeout", "[.rank]") {
  auto group = launched_world();
  ProcessGroup& world = *group;
  if (world.rank() == 0) {
    const auto start = std::chrono::steady_clock::now();
    auto m = thrown<TimeoutError>([&] { barrier(world, 300ms); });
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    CHECK((ms >= 290 && ms < 3000));
    CHECK_THAT(m, Catch::Contains("barrier") && Catch::Contains("rank 1"));
  } else {
    std::this_thread::sleep_for(800ms);
    auto m = thrown<CommError>([&] { barrier(world); });
    CHECK_THAT(m, Catch::Contains("failed on rank 0"));
  }
  Tensor t = Tensor::ones({2});
  all_reduce(world, t);
  CHECK(t.to_vector<float>() == std::vector<float>(2, 2.0f));
}
