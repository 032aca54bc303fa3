// The floor under the network figures: what plain TCP sockets give between two ranks, measured
// the way the benchmarks measure Troupe, so a goal can be read against what the machine allows.
// - 4-byte exchange: both ranks send 4 bytes, then busy-poll for the peer's (what all_reduce does
//   between two ranks); the median of --reps exchanges after two warm-ups, as all_reduce_bench.
// - Stream: 64 MB from rank 0 to rank 1 over --streams connections, a thread at each end, answered
//   with one byte (as remote_bench's 64 MB request); the median GB/s of --stream-reps.
// Every byte received is checked. Ranks as the launchers give them (RANK, MASTER_ADDR,
// MASTER_PORT): rank 0 listens on MASTER_ADDR:MASTER_PORT, rank 1 dials it.
//
//   build/bin/troupe launch --nproc 2 -- build/bin/tcp_floor --json
//   {"exchange_us_4B":..,"stream_gbs_64MB":..,"streams":2}
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "examples/command_line.h"
#include "examples/json_line.h"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("tcp_floor: " + what + (errno ? std::string(": ") + std::strerror(errno) : ""));
}

std::string env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value && *value ? value : fallback;
}

addrinfo* resolve(const std::string& host, const std::string& port) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || !found)
    throw std::runtime_error("tcp_floor: MASTER_ADDR " + host + " does not resolve");
  return found;
}

// Rank 0 accepts `count` connections on host:port, rank 1 dials them (retrying until rank 0 listens);
// either gives up after `timeout`.
std::vector<int> connect_pair(int rank, const std::string& host, const std::string& port, int count,
                              std::chrono::seconds timeout) {
  addrinfo* address = resolve(host, port);
  const auto deadline = Clock::now() + timeout;
  const std::string waited = " in " + std::to_string(timeout.count()) + " s";
  std::vector<int> fds;
  if (rank == 0) {
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(listener, address->ai_addr, address->ai_addrlen) != 0) fail("bind " + host + ":" + port);
    if (::listen(listener, count) != 0) fail("listen");
    for (int i = 0; i < count; ++i) {
      pollfd incoming{listener, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0 || ::poll(&incoming, 1, static_cast<int>(left)) != 1) {
        errno = 0;
        fail("rank 1 did not connect to " + host + ":" + port + waited);
      }
      fds.push_back(::accept(listener, nullptr, nullptr));
    }
    ::close(listener);
  } else {
    for (int i = 0; i < count; ++i) {
      int fd = -1;
      while (true) {
        fd = ::socket(AF_INET, SOCK_STREAM, 0);
        if (::connect(fd, address->ai_addr, address->ai_addrlen) == 0) break;
        ::close(fd);
        if (Clock::now() > deadline) fail("rank 0 at " + host + ":" + port + " not reached" + waited);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      fds.push_back(fd);
    }
  }
  freeaddrinfo(address);
  for (int fd : fds) {
    if (fd < 0) fail("accept");
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fds;
}

void send_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) fail("send");
    p += k;
    n -= static_cast<size_t>(k);
  }
}

void recv_all(int fd, char* p, size_t n, bool spin) {
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, spin ? MSG_DONTWAIT : MSG_WAITALL);
    if (k < 0 && spin && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (k == 0) throw std::runtime_error("tcp_floor: the peer closed the connection");
    if (k < 0) fail("recv");
    p += k;
    n -= static_cast<size_t>(k);
  }
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Median microseconds of a 4-byte exchange; each rank checks it got the peer's sequence number.
double exchange_us(int fd, int reps) {
  std::vector<double> us;
  for (int32_t i = 0; i < reps + 2; ++i) {
    int32_t got = -1;
    const auto start = Clock::now();
    send_all(fd, reinterpret_cast<const char*>(&i), sizeof i);
    recv_all(fd, reinterpret_cast<char*>(&got), sizeof got, /*spin=*/true);
    if (i >= 2) us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    if (got != i) throw std::runtime_error("tcp_floor: exchange " + std::to_string(i) + " got " + std::to_string(got));
  }
  return median(us);
}

// Median GB/s of 64 MB from rank 0 to rank 1, split over the stream connections; rank 1 checks
// every byte of the last transfer and answers each with one byte on `ack`.
double stream_gbs(int rank, int ack, const std::vector<int>& streams, int reps) {
  const size_t total = size_t{64} << 20, part = total / streams.size();
  std::vector<char> buffer(total);
  if (rank == 0)
    for (size_t i = 0; i < total; ++i) buffer[i] = static_cast<char>(i * 131 >> 7);
  std::vector<double> seconds;
  for (int r = 0; r < reps + 1; ++r) {
    const auto start = Clock::now();
    std::vector<std::thread> lanes;
    for (size_t k = 0; k < streams.size(); ++k)
      lanes.emplace_back([&, k] {
        char* p = buffer.data() + k * part;
        const size_t n = k + 1 == streams.size() ? total - k * part : part;
        if (rank == 0) send_all(streams[k], p, n);
        else recv_all(streams[k], p, n, /*spin=*/false);
      });
    for (std::thread& lane : lanes) lane.join();
    char byte = 1;
    if (rank == 0) recv_all(ack, &byte, 1, /*spin=*/false);
    else send_all(ack, &byte, 1);
    if (r > 0) seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  if (rank == 1)
    for (size_t i = 0; i < total; ++i)
      if (buffer[i] != static_cast<char>(i * 131 >> 7))
        throw std::runtime_error("tcp_floor: stream byte " + std::to_string(i) + " differs from what was sent");
  return static_cast<double>(total) / median(seconds) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 15, streams = 2, stream_reps = 11, timeout_s = 30;
  bool json = false;
  troupe::cli::App app{"plain TCP between two ranks: 4-byte exchange and 64 MB stream, the floor under Troupe's figures"};
  app.add_option("--reps", reps, "timed 4-byte exchanges (median reported)")->check(troupe::cli::PositiveNumber);
  app.add_option("--streams", streams, "connections carrying the 64 MB stream")->check(troupe::cli::Range(1, 64));
  app.add_option("--stream-reps", stream_reps, "timed 64 MB transfers (median reported)")->check(troupe::cli::PositiveNumber);
  app.add_option("--timeout", timeout_s, "seconds to wait for the other rank to connect")->check(troupe::cli::PositiveNumber);
  app.add_flag("--json", json, "one JSON line");
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
  try {
    const std::string rank_text = env_or("RANK", "0");
    if (rank_text != "0" && rank_text != "1") throw std::runtime_error("tcp_floor: RANK " + rank_text + ": two ranks, 0 and 1");
    const int rank = rank_text == "1";
    std::vector<int> fds = connect_pair(rank, env_or("MASTER_ADDR", "127.0.0.1"), env_or("MASTER_PORT", "29500"),
                                        1 + streams, std::chrono::seconds(timeout_s));
    const double exchange = exchange_us(fds[0], reps);
    const double gbs = stream_gbs(rank, fds[0], {fds.begin() + 1, fds.end()}, stream_reps);
    for (int fd : fds) ::close(fd);
    if (rank != 0) return 0;
    if (json)
      troupe::print_json_line(nlohmann::ordered_json{{"exchange_us_4B", troupe::rounded(exchange, 1)},
                                                     {"stream_gbs_64MB", troupe::rounded(gbs, 2)},
                                                     {"streams", streams}});
    else
      std::printf("4-byte exchange: %.1f us (median of %d)\n64 MB over %d stream(s): %.2f GB/s (median of %d)\n",
                  exchange, reps, streams, gbs, stream_reps);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
