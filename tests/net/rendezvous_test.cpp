// The tcp:// rendezvous between threads of one process: rank 0 binds the address its name resolves
// to (never every interface unless told), and refuses with a reason a registration as a rank taken
// or one outside the world, the real ranks unaffected.
#include <zmq.h>

#include <catch2/catch.hpp>
#include <string>
#include <thread>

#include "net/bootstrap/launcher.h"
#include "net/bootstrap/rendezvous.h"
#include "net/bootstrap/rendezvous_messages.h"
#include "net/transport.h"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

// A registration from a process that is no rank of the job: rank 0's answer.
std::string register_as(const std::string& endpoint, int rank, int world) {
  void* context = zmq_ctx_new();
  void* dealer = zmq_socket(context, ZMQ_DEALER);
  const int linger = 0;
  zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof linger);
  zmq_connect(dealer, endpoint.c_str());
  const std::string body = format_registration({rank, world, "tcp://127.0.0.1:1|ipc:///nonexistent|stranger"});
  zmq_send(dealer, body.data(), body.size(), 0);
  std::string answer(4096, '\0');
  zmq_pollitem_t item{dealer, 0, ZMQ_POLLIN, 0};
  const int n = zmq_poll(&item, 1, 10'000) > 0 ? zmq_recv(dealer, answer.data(), answer.size(), 0) : -1;
  answer.resize(n > 0 ? static_cast<size_t>(n) : 0);
  zmq_close(dealer);
  zmq_ctx_term(context);
  return answer;
}

}  // namespace

TEST_CASE("rendezvous: rank 0 serves the address its name resolves to and refuses a rank taken or beyond the world",
          "[net][rendezvous]") {
  const int port = free_tcp_port();
  const std::string method = "tcp://localhost:" + std::to_string(port);  // a name: bound as 127.0.0.1
  TransportOptions o0, o1;
  o0.world_size = o1.world_size = 2;
  o1.rank = 1;
  Transport t0(o0), t1(o1);
  std::vector<PeerAddress> table0, table1;
  std::thread rank0([&] { table0 = rendezvous(method, 0, 2, t0, deadline_after(20s)); });

  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port);
  CHECK(register_as(endpoint, 0, 2) == "error\nrendezvous: rank 0 is taken already");
  CHECK(register_as(endpoint, 5, 2) == "error\nrendezvous: rank 5 is outside a world of 2");
  CHECK(register_as(endpoint, 1, 3) == "error\nrendezvous: rank 1 says world size 3, rank 0 says 2");

  table1 = rendezvous(method, 1, 2, t1, deadline_after(20s));
  rank0.join();
  REQUIRE(table0.size() == 2);
  REQUIRE(table1.size() == 2);
  CHECK(table0[1].serialize() == t1.address().serialize());
  CHECK(table1[0].serialize() == t0.address().serialize());
  CHECK(table1[1].serialize() == t1.address().serialize());
}
