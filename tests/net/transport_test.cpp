// Two transports in one process (no fork): p2p both ways over tcp:// and ipc://, the job secret's admission,
// bad frames from a peer, strangers' frames, init_process_group's argument errors.
#include <zmq.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <thread>

#include "devices/error.h"
#include "devices/threads.h"
#include "net/process_group.h"
#include "net/transport.h"
#include "tests/net/transport_pair.h"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

using Pair = TransportPair;

// keys_b lets rank 1 hold a different job secret's keys.
Pair connect_pair(const std::string& prefer, std::optional<JobKeys> keys_a = std::nullopt,
                  std::optional<JobKeys> keys_b = std::nullopt, std::chrono::milliseconds timeout = 5s) {
  TransportOptions oa, ob;
  oa.keys = keys_a;
  ob.keys = keys_b;
  return net::connect_pair(prefer, oa, ob, timeout);
}

}  // namespace

TEST_CASE("transport: p2p both ways over tcp and ipc, small and zero-copy", "[net][transport]") {
  for (const char* prefer : {"tcp", "ipc", "auto"}) {
    Pair p = connect_pair(prefer);
    CHECK(p.a->address().tcp.rfind("tcp://127.0.0.1:", 0) == 0);
    CHECK(p.a->address().ipc.rfind("ipc://", 0) == 0);
    Tensor small = Tensor::from_vector<int32_t>({1, 2, 3}, {3});
    Tensor big = Tensor::arange(1 << 16, DType::f32);  // 256 KB: sent by reference
    auto sent = std::make_shared<net::detail::Completion>();
    p.a->send(1, data_header(1), small);
    p.a->send(1, data_header(2), big, sent);
    p.b->send(0, data_header(3), small.to(DType::f64));
    CHECK(receive(*p.b, 1, 0).to_vector<int32_t>() == std::vector<int32_t>({1, 2, 3}));
    Tensor got = receive(*p.b, 2, 0);
    CHECK(got.shape() == Shape{1 << 16});
    CHECK(got.to_vector<float>() == big.to_vector<float>());
    CHECK(sent->wait_until(deadline_after(5s)));
    CHECK(receive(*p.a, 3, 1).to_vector<double>() == std::vector<double>({1, 2, 3}));
    // The received tensor adopted the message's bytes and is writable (copy-on-write semantics hold).
    got.mutable_data<float>()[0] = 5;
    CHECK(got.to_vector<float>()[0] == 5);
  }
}

TEST_CASE("transport: busy-polls only while each rank of the machine has a CPU, unless told", "[net][transport]") {
  CHECK(busy_poll_for(2, 2) == 50us);
  CHECK(busy_poll_for(1, 1) == 50us);
  CHECK(busy_poll_for(3, 2) == 0us);  // a spinner would hold the CPU its peer needs to answer
  CHECK(small_collective_poll_for(2, 2) == 10000us);
  CHECK(small_collective_poll_for(3, 2) == 0us);
  // Two ranks in one process count as two on this machine: the choice follows this process's CPUs.
  Pair chosen = connect_pair("tcp");
  CHECK(chosen.a->busy_poll() == busy_poll_for(2, hardware_cores()));
  CHECK(chosen.a->small_collective_poll() == small_collective_poll_for(2, hardware_cores()));
  TransportOptions told_a, told_b;
  told_a.busy_poll = told_b.busy_poll = 7us;
  told_a.small_collective_poll = told_b.small_collective_poll = 9us;
  Pair told = net::connect_pair("tcp", told_a, told_b);
  CHECK(told.a->busy_poll() == 7us);
  CHECK(told.b->busy_poll() == 7us);
  CHECK(told.a->small_collective_poll() == 9us);
  CHECK(told.b->small_collective_poll() == 9us);
  // No spinning told: none in small collectives either, unless told that too.
  TransportOptions still;
  still.busy_poll = 0us;
  Pair quiet = net::connect_pair("tcp", still, still);
  CHECK(quiet.a->small_collective_poll() == 0us);
}

TEST_CASE("transport: a receive told to poll longer still gets its message and still times out",
          "[net][transport]") {
  TransportOptions options;
  options.busy_poll = 0us;  // only the wait's own poll keeps the thread awake
  Pair p = net::connect_pair("tcp", options, options);
  auto early = p.b->post(0, Inbox::collective, 1, 0);
  FrameHeader h;
  h.kind = FrameKind::collective;
  h.tag = 1;
  p.a->send(1, h, Tensor::from_vector<float>({4}, {1}));
  auto m = p.b->wait(early, deadline_after(5s), 20ms);
  REQUIRE(m);
  CHECK(m->payload.to_vector<float>() == std::vector<float>({4}));
  // Nothing comes: the poll ends at the deadline, not after it, and the receive is cancelled.
  auto never = p.b->post(0, Inbox::collective, 2, 0);
  const auto start = Clock::now();
  CHECK_FALSE(p.b->wait(never, deadline_after(30ms), 1s));
  CHECK(Clock::now() - start < 900ms);
}

TEST_CASE("transport: a receive that times out is cancelled and consumes nothing", "[net][transport]") {
  Pair p = connect_pair("ipc");
  auto slot = p.b->post(0, Inbox::p2p, 9, 0);
  CHECK_FALSE(p.b->wait(slot, deadline_after(50ms)).has_value());
  p.a->send(1, data_header(9), Tensor::scalar<float>(4));
  CHECK(receive(*p.b, 9, 0).item<float>() == 4);
  // Lanes and groups keep messages apart.
  FrameHeader other_group = data_header(9);
  other_group.group = 77;
  p.a->send(1, other_group, Tensor::scalar<float>(1));
  CHECK_FALSE(p.b->wait(p.b->post(0, Inbox::p2p, 9, 0), deadline_after(100ms)).has_value());
  CHECK_FALSE(p.b->wait(p.b->post(77, Inbox::collective, 9, 0), deadline_after(50ms)).has_value());
  auto m = p.b->wait(p.b->post(77, Inbox::p2p, 9, -1), deadline_after(5s));
  REQUIRE(m.has_value());
  CHECK(m->source == 0);
}

TEST_CASE("transport: the job secret's keys admit the job and nothing else", "[net][transport][secret]") {
  const JobKeys job = derive_job_keys(generate_job_secret());
  CHECK(job.curve.public_key.size() == 40);
  auto other = [] { return derive_job_keys(generate_job_secret()); };
  {
    Pair p = connect_pair("tcp", job, job);
    CHECK(p.a->direct_links() == 1);  // the direct link's handshake passed too
    p.a->send(1, data_header(1), Tensor::scalar<int64_t>(42));
    CHECK(receive(*p.b, 1, 0).item<int64_t>() == 42);
  }
  // A rank holding another secret is never admitted: init times out naming it.
  CHECK_THROWS_AS(connect_pair("tcp", job, other(), 1s), TimeoutError);
  CHECK_THROWS_WITH(connect_pair("tcp", job, other(), 1s), Catch::Contains("rank(s) 1"));
  // And a rank without the secret cannot talk to one with it.
  CHECK_THROWS_AS(connect_pair("tcp", job, std::nullopt, 1s), TimeoutError);
}

TEST_CASE("transport: a peer's malformed frame breaks it with CommError, strangers are dropped", "[net][transport]") {
  Transport t(unconnected_rank0());
  auto slot = t.post(0, Inbox::p2p, 1, -1);
  void* context = zmq_ctx_new();
  auto send_as = [&](const std::string& identity, const std::vector<std::string>& parts) {
    void* s = zmq_socket(context, ZMQ_DEALER);
    zmq_setsockopt(s, ZMQ_ROUTING_ID, identity.data(), identity.size());
    zmq_connect(s, t.address().tcp.c_str());
    for (size_t i = 0; i < parts.size(); ++i)
      zmq_send(s, parts[i].data(), parts[i].size(), i + 1 < parts.size() ? ZMQ_SNDMORE : 0);
    int linger = 1000;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_close(s);
  };
  send_as("stranger", {"garbage"});
  for (int i = 0; i < 100 && t.dropped_frames() == 0; ++i) std::this_thread::sleep_for(10ms);
  CHECK(t.dropped_frames() == 1);
  CHECK_FALSE(t.is_ready(*slot));

  std::string rank1 = "T";
  const int one = 1;
  rank1.append(reinterpret_cast<const char*>(&one), 4);
  send_as(rank1, {"not a frame"});
  CHECK_THROWS_AS(t.wait(slot, deadline_after(5s)), CommError);
  CHECK_THROWS_WITH(t.check_healthy(), Catch::Contains("rank 1 sent a bad frame") && Catch::Contains("malformed"));
  zmq_ctx_term(context);
}

TEST_CASE("init_process_group: missing or bad settings are typed errors", "[net][init]") {
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("SLURM_PROCID");
  auto opts = [](std::string method, int rank, int world, std::string transport = "", std::string key = "") {
    InitOptions o;
    o.init_method = std::move(method);
    o.rank = rank;
    o.world_size = world;
    o.timeout = 1s;
    o.transport = std::move(transport);
    o.secret_file = std::move(key);
    return o;
  };
  CHECK_THROWS_AS(init_process_group({}), ValueError);
  CHECK_THROWS_WITH(init_process_group({}), Catch::Contains("RANK"));
  CHECK_THROWS_WITH(init_process_group(opts("env://", 0, -1)), Catch::Contains("WORLD_SIZE"));
  CHECK_THROWS_WITH(init_process_group(opts("env://", 3, 2)), Catch::Contains("rank 3 (InitOptions::rank)"));
  CHECK_THROWS_WITH(init_process_group(opts("env://", 0, 1)), Catch::Contains("MASTER_ADDR"));
  // Several ranks and no secret: refused, saying how to make one and how to opt out.
  CHECK_THROWS_WITH(init_process_group(opts("tcp://127.0.0.1:1", 0, 2)),
                    Catch::Contains("troupe secret FILE") && Catch::Contains("TROUPE_INSECURE=1"));
  ::setenv("TROUPE_CURVE_SECRET_FILE", "/x", 1);
  CHECK_THROWS_WITH(init_process_group(opts("tcp://127.0.0.1:1", 0, 1)), Catch::Contains("TROUPE_JOB_SECRET_FILE"));
  ::unsetenv("TROUPE_CURVE_SECRET_FILE");
  ::setenv("TROUPE_INSECURE", "1", 1);
  CHECK_THROWS_WITH(init_process_group(opts("udp://x", 0, 2)), Catch::Contains("unknown init method"));
  ::unsetenv("TROUPE_INSECURE");
  CHECK_THROWS_WITH(init_process_group(opts("tcp://127.0.0.1:1", 0, 1, "carrier-pigeon")),
                    Catch::Contains("auto, tcp or ipc"));
  CHECK_THROWS_WITH(init_process_group(opts("tcp://nohost", 0, 2)), Catch::Contains("HOST:PORT"));
  // A world of one needs no peers; its p2p is self-sends.
  auto solo = init_process_group(opts("tcp://127.0.0.1:1", 0, 1));
  solo->send(Tensor::scalar<float>(2), 0, 0);
  Tensor x;
  CHECK(solo->recv(x, 0, 0) == 0);
  CHECK(x.item<float>() == 2);
  // The small-collective poll from the environment: a negative one is refused, naming it.
  ::setenv("TROUPE_SMALL_COLLECTIVE_POLL_US", "-3", 1);
  CHECK_THROWS_WITH(init_process_group(opts("tcp://127.0.0.1:1", 0, 1)),
                    Catch::Contains("TROUPE_SMALL_COLLECTIVE_POLL_US=-3 is negative"));
  ::setenv("TROUPE_SMALL_COLLECTIVE_POLL_US", "700", 1);
  CHECK(init_process_group(opts("tcp://127.0.0.1:1", 0, 1))->transport().small_collective_poll() == 700us);
  ::unsetenv("TROUPE_SMALL_COLLECTIVE_POLL_US");
  // The peer timeout from the environment: heartbeats every 200 ms, or 4 to a shorter timeout;
  // one shorter than 4 heartbeats of 50 ms is refused, naming it.
  ::setenv("TROUPE_PEER_TIMEOUT_MS", "100", 1);
  CHECK_THROWS_WITH(init_process_group(opts("tcp://127.0.0.1:1", 0, 1)),
                    Catch::Contains("TROUPE_PEER_TIMEOUT_MS=100 is under 200 ms"));
  ::setenv("TROUPE_PEER_TIMEOUT_MS", "5000", 1);
  CHECK(init_process_group(opts("tcp://127.0.0.1:1", 0, 1))->transport().heartbeat_interval() == 200ms);
  ::setenv("TROUPE_PEER_TIMEOUT_MS", "500", 1);
  {
    auto group = init_process_group(opts("tcp://127.0.0.1:1", 0, 1));
    CHECK(group->transport().peer_timeout() == 500ms);
    CHECK(group->transport().heartbeat_interval() == 125ms);
  }
  ::unsetenv("TROUPE_PEER_TIMEOUT_MS");
  // A secret file others can read is refused.
  const std::string key = (std::filesystem::temp_directory_path() / "troupe-test-open.secret").string();
  write_job_secret_file(key, generate_job_secret());
  std::filesystem::permissions(key, std::filesystem::perms::group_read, std::filesystem::perm_options::add);
  CHECK_THROWS_WITH(init_process_group(opts("tcp://127.0.0.1:1", 0, 1, "", key)),
                    Catch::Contains("readable by group or others"));
  std::filesystem::remove(key);
}
