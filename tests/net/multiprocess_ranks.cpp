// The ranks of multiprocess_test.cpp: each hidden test case is one rank, started N times by
// run_ranks (tests/support/ranks.h), or by hand:
//   troupe launch --nproc 2 -- build/bin/test_net "net rank: latency"
#include <signal.h>
#include <unistd.h>
#include <zmq.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

#include "devices/threads.h"
#include "net/channel.h"
#include "net/direct_link.h"
#include "net/collectives/group_state.h"
#include "net/process_group.h"
#include "net/transport.h"
#include "support/close.h"
#include "support/thrown.h"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

// Values that depend on the seed: checkable on arrival.
Tensor pattern_seeded(DType t, const Shape& s, int seed) {
  std::vector<double> v(static_cast<size_t>(numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((seed * 7 + i) % 100);
  return Tensor::from_vector<double>(v, s).to(t);
}

// env:// (the launcher's variables), or the init method in TROUPE_TEST_INIT_METHOD.
InitOptions init_options() {
  InitOptions o;
  if (const char* method = std::getenv("TROUPE_TEST_INIT_METHOD")) o.init_method = method;
  o.timeout = 20s;
  return o;
}

// Every rank waits here for every other, with p2p messages only (the collectives are tested elsewhere).
void p2p_barrier(ProcessGroup& world) {
  Tensor t = Tensor::zeros({1});
  if (world.rank() == 0) {
    for (int r = 1; r < world.size(); ++r) world.recv(t, r, -1);
    for (int r = 1; r < world.size(); ++r) world.send(t, r, -1);
  } else {
    world.send(t, 0, -1);
    world.recv(t, 0, -1);
  }
}

}  // namespace

// Blocking and non-blocking p2p over every dtype and several shapes, tags, any-source, sub-groups.
TEST_CASE("net rank: p2p", "[.rank]") {
  auto group = init_process_group(init_options());
  ProcessGroup& world = *group;
  const int rank = world.rank(), size = world.size();
  const DType dtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::boolean};
  const Shape shapes[] = {{}, {1}, {3, 4}, {2, 3, 5}, {0, 4}, {1 << 18}};  // scalar, empty, 1 MB (zero-copy)

  // Ring: each rank sends to rank+1, receives from rank-1, blocking (even ranks send first).
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  int seed = 0;
  for (DType t : dtypes)
    for (const Shape& s : shapes) {
      ++seed;
      Tensor mine = pattern_seeded(t, s, seed * 10 + rank);
      Tensor got = Tensor::zeros(s, t);
      if (rank % 2 == 0) {
        world.send(mine, right, seed);
        world.recv(got, left, seed);
      } else {
        world.recv(got, left, seed);
        world.send(mine, right, seed);
      }
      check_close(got, pattern_seeded(t, s, seed * 10 + left));
    }

  // Non-blocking: post every receive first, then send, then wait in reverse order.
  std::vector<Tensor> inbox(8);
  std::vector<Work> recvs, sends;
  for (int i = 0; i < 8; ++i) {
    inbox[i] = Tensor::zeros({16}, DType::f32);
    recvs.push_back(world.irecv(inbox[i], left, 1000 + i));
  }
  for (int i = 0; i < 8; ++i) sends.push_back(world.isend(pattern_seeded(DType::f32, {16}, i + rank), right, 1000 + i));
  for (int i = 7; i >= 0; --i) recvs[i].wait();
  for (auto& w : sends) w.wait();
  for (int i = 0; i < 8; ++i) {
    check_close(inbox[i], pattern_seeded(DType::f32, {16}, i + left));
    CHECK(recvs[i].is_completed());
    CHECK(recvs[i].source() == left);
  }

  // Same tag, same pair: messages arrive in order; receives match in posting order.
  if (rank == 0) {
    for (int i = 0; i < 5; ++i) world.send(Tensor::scalar<int64_t>(i), 1 % size, 7);
  }
  if (rank == 1 % size) {
    Tensor a, b;
    Work wa = world.irecv(a, 0, 7), wb = world.irecv(b, 0, 7);
    wb.wait();
    wa.wait();
    CHECK((a.item<int64_t>() == 0 && b.item<int64_t>() == 1));
    for (int i = 2; i < 5; ++i) {
      Tensor x;
      world.recv(x, 0, 7);
      CHECK(x.item<int64_t>() == i);
    }
  }

  // Any source: rank 0 hears from everyone, and learns who.
  if (rank == 0) {
    std::vector<bool> heard(size, false);
    for (int i = 1; i < size; ++i) {
      Tensor x = Tensor::zeros({2}, DType::i32);
      const int from = world.recv(x, ProcessGroup::kAnySource, 42);
      CHECK((from >= 1 && from < size && !heard[from]));
      if (from >= 1 && from < size) heard[from] = true;
      CHECK(x.to_vector<int32_t>() == std::vector<int32_t>({from, from * 10}));
    }
  } else {
    world.send(Tensor::from_vector<int32_t>({rank, rank * 10}, {2}), 0, 42);
  }

  // Views and strided tensors travel as their values.
  if (size >= 2 && rank < 2) {
    Tensor base = Tensor::arange(12, DType::f32).reshape({3, 4});
    if (rank == 0) world.send(base.transpose(0, 1), 1, 77);
    else {
      Tensor got = Tensor::zeros({4, 3}, DType::f32);
      world.recv(got, 0, 77);
      check_close(got, base.transpose(0, 1).contiguous());
    }
  }

  // Mismatched expectations name both sides.
  if (size >= 2 && rank < 2) {
    if (rank == 0) {
      world.send(Tensor::zeros({4}, DType::i32), 1, 88);
      world.send(Tensor::zeros({5}, DType::f32), 1, 89);
    } else {
      Tensor want = Tensor::zeros({4}, DType::f32);
      auto m1 = thrown<DTypeError>([&] { world.recv(want, 0, 88); });
      CHECK_THAT(m1, Catch::Contains("i32[4]") && Catch::Contains("f32[4]"));
      auto m2 = thrown<ShapeError>([&] { world.recv(want, 0, 89); });
      CHECK_THAT(m2, Catch::Contains("f32[5]") && Catch::Contains("f32[4]"));
    }
  }

  // Self-send works and shares nothing the sender could change.
  {
    Tensor t = Tensor::from_vector<float>({1, 2}, {2});
    world.send(t, rank, 5);
    t.mutable_data<float>()[0] = 9;
    Tensor got;
    world.recv(got, rank, 5);
    CHECK(got.to_vector<float>() == std::vector<float>({1, 2}));
  }

  // Bad arguments are typed errors.
  Tensor dummy = Tensor::zeros({1});
  CHECK_THROWS_AS(world.send(dummy, size, 0), IndexError);
  CHECK_THROWS_AS(world.recv(dummy, -2, 0), IndexError);
  CHECK_THROWS_AS(world.send(Tensor(), 0, 0), ValueError);

  // Sub-groups: same tags in the world and in a sub-group never mix.
  auto evens_list = std::vector<int>{};
  for (int r = 0; r < size; r += 2) evens_list.push_back(r);
  auto evens = world.new_group(evens_list);
  CHECK((evens != nullptr) == (rank % 2 == 0));
  if (size >= 4 && rank == 0) {
    // Rank 2 sends on the world and on the sub-group with the same tag: each lands in its own group.
    Tensor w = Tensor::zeros({}, DType::i32), g = Tensor::zeros({}, DType::i32);
    evens->recv(g, 1, 3);  // sub-group rank 1 is world rank 2
    world.recv(w, 2, 3);
    CHECK((g.item<int32_t>() == 200 && w.item<int32_t>() == 100));
    CHECK((evens->size() == (size + 1) / 2 && evens->rank() == 0));
  }
  if (size >= 4 && rank == 2) {
    world.send(Tensor::scalar<int32_t>(100), 0, 3);
    evens->send(Tensor::scalar<int32_t>(200), 0, 3);
  }
  if (size >= 2) {
    // A group of {1, 0} numbers its ranks in the order given.
    auto swapped = world.new_group({1, 0});
    if (rank < 2) {
      CHECK((swapped && swapped->rank() == 1 - rank));
      Tensor x = Tensor::scalar<int32_t>(rank);
      Tensor y = Tensor::zeros({}, DType::i32);
      if (swapped->rank() == 0) {
        swapped->send(x, 1, 0);
        swapped->recv(y, 1, 0);
      } else {
        swapped->recv(y, 0, 0);
        swapped->send(x, 0, 0);
      }
      CHECK(y.item<int32_t>() == 1 - rank);
    } else {
      CHECK(swapped == nullptr);
    }
  }
  CHECK_THROWS_AS((world.new_group({0, 0})), ValueError);
  CHECK_THROWS_AS(world.new_group({size}), IndexError);

  // Everyone finishes together so no rank leaves while another still needs it.
  if (rank == 0) {
    for (int r = 1; r < size; ++r) world.recv(dummy, r, 9999);
    for (int r = 1; r < size; ++r) world.send(dummy, r, 9999);
  } else {
    world.send(dummy, 0, 9999);
    world.recv(dummy, 0, 9999);
  }
}

// The ranks of this machine (all its network namespaces) that fit its CPUs each wait on a CPU of
// their own; more ranks than CPUs: none.
TEST_CASE("net rank: home cpus", "[.rank]") {
  auto group = init_process_group(init_options());
  ProcessGroup& world = *group;
  const int home = world.transport().home_cpu();
  CHECK(home >= -1);  // a CPU, or -1: none
  if (world.rank() != 0) {
    world.send(Tensor::scalar<int64_t>(home), 0, 3);
    return p2p_barrier(world);
  }
  std::vector<int64_t> homes{home};
  for (int r = 1; r < world.size(); ++r) {
    Tensor h = Tensor::scalar<int64_t>(-2);
    world.recv(h, r, 3);
    homes.push_back(h.item<int64_t>());
  }
  p2p_barrier(world);
  std::string listed;
  for (int64_t h : homes) listed += std::to_string(h) + " ";
  INFO("home CPUs by rank: " << listed << "; cores " << hardware_cores());
  if (world.size() <= hardware_cores()) {
    std::sort(homes.begin(), homes.end());
    CHECK(homes.front() >= 0);
    CHECK(std::adjacent_find(homes.begin(), homes.end()) == homes.end());
  } else {
    CHECK(std::all_of(homes.begin(), homes.end(), [](int64_t h) { return h == -1; }));
  }
}

// Round trips of a 4-byte tensor between ranks 0 and 1, and 64 MB each way; rank 0 prints the median.
TEST_CASE("net rank: latency", "[.rank]") {
  auto group = init_process_group(init_options());
  ProcessGroup& world = *group;
  const int iters = 2000;
  Tensor t = Tensor::scalar<float>(1.0f);
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (world.rank() == 0) {
      world.send(t, 1, 0);
      world.recv(t, 1, 0);
    } else if (world.rank() == 1) {
      world.recv(t, 0, 0);
      world.send(t, 0, 0);
    }
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(us.begin(), us.end());
  if (world.rank() == 0)
    std::cout << "latency round_trip_us median " << us[us.size() / 2] << " p10 " << us[us.size() / 10] << " p90 "
              << us[us.size() * 9 / 10] << std::endl;
  // Bandwidth of one 64 MB message each way.
  Tensor big = Tensor::ones({16 << 20}, DType::f32);
  Tensor got = Tensor::zeros({16 << 20}, DType::f32);
  const auto start = std::chrono::steady_clock::now();
  const int reps = 4;
  for (int i = 0; i < reps; ++i) {
    if (world.rank() == 0) {
      world.send(big, 1, 1);
      world.recv(got, 1, 1);
    } else if (world.rank() == 1) {
      world.recv(got, 0, 1);
      world.send(big, 0, 1);
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (world.rank() == 0) std::cout << "bandwidth_GBs " << (2.0 * reps * big.nbytes() / s / 1e9) << std::endl;
  p2p_barrier(world);
}

TEST_CASE("net rank: timeouts", "[.rank]") {
  auto group = init_process_group(init_options());
  ProcessGroup& world = *group;
  Tensor t = Tensor::zeros({1});
  const auto start = std::chrono::steady_clock::now();
  auto m = thrown<TimeoutError>([&] { world.recv(t, (world.rank() + 1) % world.size(), 12345, 300ms); });
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  CHECK((ms >= 290 && ms < 3000));
  CHECK_THAT(m, Catch::Contains("tag 12345"));
  Work w = world.irecv(t, ProcessGroup::kAnySource, 12346);
  CHECK_THROWS_AS(w.wait(100ms), TimeoutError);
  // The group's own timeout applies when the call gives none.
  world.set_timeout(200ms);
  CHECK_THROWS_AS(world.recv(t, ProcessGroup::kAnySource, 12347), TimeoutError);
  world.set_timeout(20s);
  // A timed-out receive consumed nothing: a later message with that tag still arrives.
  p2p_barrier(world);
  if (world.rank() == 0) world.send(Tensor::scalar<float>(3), world.size() - 1, 12346);
  if (world.rank() == world.size() - 1) {
    Tensor x;
    world.recv(x, 0, 12346);
    CHECK(x.item<float>() == 3);
  }
  p2p_barrier(world);
}

// Rank 1 dies by SIGKILL while the others wait on it (and on each other).
TEST_CASE("net rank: kill", "[.rank]") {
  auto group = init_process_group(init_options());
  ProcessGroup& world = *group;
  p2p_barrier(world);
  if (world.rank() == 1) {
    std::this_thread::sleep_for(200ms);
    ::kill(::getpid(), SIGKILL);
  }
  const auto start = std::chrono::steady_clock::now();
  Tensor t = Tensor::zeros({1});
  auto m = thrown<PeerLostError>([&] { world.recv(t, 1, 0, 60s); });
  CHECK_THAT(m, Catch::Contains("rank 1"));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(s < 5.0);
  // Every later operation fails too, even with live peers.
  auto later = thrown<PeerLostError>([&] { world.recv(t, ProcessGroup::kAnySource, 1, 60s); });
  CHECK_THAT(later, Catch::Contains("rank 1"));
  CHECK_THROWS_AS(world.send(t, 0, 0), PeerLostError);
}

// With the job secret (troupe launch makes one): p2p works, and processes without it cannot get a
// frame in, through the ROUTER (no keys, another job's keys) or a direct link (another job's
// secret, the insecure zero key); the job's own frames still come.
TEST_CASE("net rank: secret", "[.rank]") {
  auto group = init_process_group(init_options());
  ProcessGroup& world = *group;
  REQUIRE(world.transport().keys().has_value());
  const JobKeys& keys = *world.transport().keys();
  Tensor t = Tensor::zeros({4}, DType::f32);
  if (world.rank() == 0) {
    world.send(pattern_seeded(DType::f32, {4}, 1), 1, 1);
    // Forged frames claiming to be rank 1, from a socket without keys and one with another job's keys.
    const std::string endpoint = world.transport().address().tcp;
    void* context = zmq_ctx_new();
    const JobKeys wrong = derive_job_keys(generate_job_secret());
    for (int attempt = 0; attempt < 2; ++attempt) {
      void* rogue = zmq_socket(context, ZMQ_DEALER);
      std::string id = "T";
      int one = 1;
      id.append(reinterpret_cast<const char*>(&one), 4);
      zmq_setsockopt(rogue, ZMQ_ROUTING_ID, id.data(), id.size());
      if (attempt == 1) {
        zmq_setsockopt(rogue, ZMQ_CURVE_SERVERKEY, keys.curve.public_key.data(), 40);
        zmq_setsockopt(rogue, ZMQ_CURVE_PUBLICKEY, wrong.curve.public_key.data(), 40);
        zmq_setsockopt(rogue, ZMQ_CURVE_SECRETKEY, wrong.curve.secret_key.data(), 40);
      }
      zmq_connect(rogue, endpoint.c_str());
      FrameHeader h;
      h.kind = FrameKind::data;
      h.source = 1;
      h.tag = 99;
      h.dtype = DType::f32;
      h.shape = {4};
      h.payload_bytes = 16;
      auto bytes = encode_header(h);
      float evil[4] = {666, 666, 666, 666};
      zmq_send(rogue, bytes.data(), bytes.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
      zmq_send(rogue, evil, sizeof evil, ZMQ_DONTWAIT);
      std::this_thread::sleep_for(300ms);
      int zero = 0;
      zmq_setsockopt(rogue, ZMQ_LINGER, &zero, sizeof zero);
      zmq_close(rogue);
    }
    zmq_ctx_term(context);
    CHECK_THROWS_AS(world.recv(t, 1, 99, 300ms), TimeoutError);
    // This rank's direct-link port, dialed as rank 1 with another job's secret, then with the
    // insecure zero key: refused (one line each here), and the dialer is told.
    const std::string direct = world.transport().address().direct;
    REQUIRE_FALSE(direct.empty());
    CHECK_THROWS_WITH(dial_direct(direct, 1, 0, 0, wrong, deadline_after(5s)), Catch::Contains("closed"));
    CHECK_THROWS_WITH(dial_direct(direct, 1, 0, 0, JobKeys{}, deadline_after(5s)), Catch::Contains("closed"));
    world.send(t, 1, 2);  // now rank 1 sends the real one
    world.recv(t, 1, 99);
    check_close(t, pattern_seeded(DType::f32, {4}, 2));
  } else if (world.rank() == 1) {
    world.recv(t, 0, 1);
    check_close(t, pattern_seeded(DType::f32, {4}, 1));
    world.recv(t, 0, 2);
    world.send(pattern_seeded(DType::f32, {4}, 2), 0, 99);
  }
  p2p_barrier(world);
}

// An encrypted job (troupe launch --encrypt): small frames on the direct link and large ones on
// the stripes, sealed (net/sealed_stream.h), medium ones through ZeroMQ's CURVE; what arrives is
// bit for bit what was sent, on every path.
TEST_CASE("net rank: encrypted", "[.rank]") {
  auto group = init_process_group(init_options());
  ProcessGroup& world = *group;
  REQUIRE(world.transport().keys().has_value());
  CHECK(world.transport().direct_links() == 1);
  // Until its direct connection is proven, a rank sends small frames through ZeroMQ (a loaded
  // machine, ThreadSanitizer: that can take a while). Exchanges first, until each rank has received
  // one over the direct link (each exchange carries whether its sender has), so that what is counted
  // below is the paths' steady choice. Both ranks see the same two flags and stop together.
  // Frames are counted as they arrive, not as recv takes them: each rank reads its counts while
  // the peer waits for it (rank 1 before its last send), so the peer's first frame below is not
  // in them.
  const uint64_t direct_at_start = world.transport().direct_frames();
  auto seen_direct = [&] { return Tensor::scalar<float>(world.transport().direct_frames() > direct_at_start); };
  uint64_t direct_before = 0, striped_before = 0;
  auto read_counts = [&] {
    direct_before = world.transport().direct_frames();
    striped_before = world.transport().striped_frames();
  };
  for (int round = 0; round < 200; ++round) {
    Tensor mine, theirs = Tensor::zeros({}, DType::f32);
    if (world.rank() == 0) {
      mine = seen_direct();
      world.send(mine, 1, 99);
      world.recv(theirs, 1, 99);
      read_counts();
    } else {
      world.recv(theirs, 0, 99);
      mine = seen_direct();
      read_counts();
      world.send(mine, 0, 99);
    }
    if (mine.item<float>() > 0 && theirs.item<float>() > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int peer = 1 - world.rank();
  int tag = 0;
  for (const Shape& shape : {Shape{1}, Shape{25000}, Shape{1 << 21}}) {  // 4 B, 100 KB, 8 MB
    const Tensor mine = pattern_seeded(DType::f32, shape, ++tag * 2 + world.rank());
    Tensor got = Tensor::zeros(shape, DType::f32);
    if (world.rank() == 0) {
      world.send(mine, peer, tag);
      world.recv(got, peer, tag);
    } else {
      world.recv(got, peer, tag);
      world.send(mine, peer, tag);
    }
    const Tensor expected = pattern_seeded(DType::f32, shape, tag * 2 + peer);
    CHECK(std::memcmp(got.data<float>(), expected.data<float>(), expected.numel() * sizeof(float)) == 0);
  }
  CHECK(world.transport().direct_frames() > direct_before);      // the 4 B frame, sealed
  CHECK(world.transport().striped_frames() == striped_before + 1);  // the 8 MB frame, sealed
  p2p_barrier(world);
}

// Rank 1 holds another job's secret (TROUPE_TEST_WRONG_SECRET, taken by rank 1 alone): it cannot
// join, and both sides say why, naming the secret and the missing rank.
TEST_CASE("net rank: wrong secret", "[.rank]") {
  InitOptions o = init_options();
  o.timeout = 3s;
  const bool rank1 = std::getenv("RANK") == std::string("1");
  if (const char* wrong = std::getenv("TROUPE_TEST_WRONG_SECRET"); wrong && rank1) o.secret_file = wrong;
  const std::string why = thrown<TimeoutError>([&] { init_process_group(o); });
  if (rank1) CHECK_THAT(why, Catch::Contains("same job secret?"));
  else CHECK_THAT(why, Catch::Contains("rank(s) 1"));
}

// The collectives' channel: matching descriptors pass, mismatched ones fail on both ranks.
TEST_CASE("net rank: channel", "[.rank]") {
  auto group = init_process_group(init_options());
  ProcessGroup& world = *group;
  Channel ch(group);
  collectives::GroupState& numbering = collectives::GroupState::of(world);
  const int peer = 1 - world.rank();
  const uint64_t seq = numbering.next_seq();
  OpDescriptor op{CollectiveOp::all_reduce, ReduceOp::sum, DType::f32, 4, seq};
  ch.send(peer, op, Tensor::full({4}, world.rank() + 1.0));
  auto in = ch.recv(peer, op, ch.deadline());
  CHECK((in.source == peer && in.payload.to_vector<float>() == std::vector<float>(4, peer + 1.0f)));
  // A p2p message with tag == seq does not leak into the collective lane.
  world.send(Tensor::zeros({1}), peer, static_cast<int64_t>(seq + 1));
  const uint64_t seq2 = numbering.next_seq();
  OpDescriptor mine = world.rank() == 0 ? OpDescriptor{CollectiveOp::all_reduce, ReduceOp::sum, DType::f32, 4, seq2}
                                        : OpDescriptor{CollectiveOp::broadcast, ReduceOp::none, DType::f32, 4, seq2};
  ch.send(peer, mine, Tensor::zeros({4}));
  auto m = thrown<CommError>([&] { ch.recv(peer, mine, ch.deadline()); });
  CHECK_THAT(m, Catch::Contains("all_reduce(sum, f32, 4 elements)") && Catch::Contains("broadcast(f32, 4 elements)"));
  CHECK_THAT(m, Catch::Contains("rank 0") && Catch::Contains("rank 1"));
  Tensor stray;
  world.recv(stray, peer, static_cast<int64_t>(seq + 1));
  p2p_barrier(world);
}

// One rank more than started: the rendezvous (env://, or TROUPE_TEST_INIT_METHOD) must name it.
TEST_CASE("net rank: rendezvous timeout", "[.rank]") {
  InitOptions o = init_options();
  o.world_size = std::atoi(std::getenv("WORLD_SIZE")) + 1;
  o.timeout = 3s;  // long enough for the started ranks to register on a loaded 2-core CI machine
  const std::string m = thrown<TimeoutError>([&] { init_process_group(o); });
  CHECK_THAT(m, Catch::Contains("rank(s) " + std::to_string(o.world_size - 1) + " did not register"));
}
