#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "actors/fork.h"
#include "actors/observe/metrics.h"
#include "actors/observe/metrics_server.h"
#include "actors/module_actor.h"
#include "support/two_workers.h"

using namespace troupe;

namespace {

// The value of the sample line that starts with `series` ("name{labels}"), or -1.
double sample(const std::string& text, const std::string& series) {
  size_t at = 0;
  while ((at = text.find(series + " ", at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') return std::stod(text.substr(at + series.size() + 1));
    at += series.size();
  }
  return -1;
}

std::string http_get(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  REQUIRE(::send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size()));
  std::string reply;
  char buffer[4096];
  while (true) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    reply.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return reply;
}

struct Adder {
  int operator()(int x) {
    if (x < 0) throw std::invalid_argument("negative");
    return x + 1;
  }
};

}  // namespace

TEST_CASE("metrics: counters, gauges and histograms in Prometheus' text format", "[actors][metrics]") {
  metrics::counter("test_things_total", "Things", {{"kind", "a\"b"}}).add(3);
  metrics::counter("test_things_total", "Things", {{"kind", "a\"b"}}).add(2);  // the same series
  metrics::gauge("test_level", "Level").add(-4);
  auto& h = metrics::histogram("test_wait_seconds", "Waits", {}, {0.001, 0.01});
  h.observe(0.0005);
  h.observe(0.005);
  h.observe(5);
  const std::string text = metrics::exposition();
  CHECK(text.find("# TYPE test_things_total counter\n") != std::string::npos);
  CHECK(sample(text, "test_things_total{kind=\"a\\\"b\"}") == 5);
  CHECK(sample(text, "test_level") == -4);
  CHECK(sample(text, "test_wait_seconds_bucket{le=\"0.001\"}") == 1);
  CHECK(sample(text, "test_wait_seconds_bucket{le=\"0.01\"}") == 2);
  CHECK(sample(text, "test_wait_seconds_bucket{le=\"+Inf\"}") == 3);
  CHECK(sample(text, "test_wait_seconds_count") == 3);
  CHECK(sample(text, "test_wait_seconds_sum") == Approx(5.0055));
  CHECK(sample(text, "troupe_process_resident_memory_bytes") > 1e6);
  CHECK_THROWS_AS(metrics::gauge("test_things_total", "Things"), ValueError);  // a counter already
  CHECK_THROWS_AS(metrics::counter("bad-name", "x"), ValueError);
}

TEST_CASE("metrics: off, updates change nothing", "[actors][metrics]") {
  auto& c = metrics::counter("test_off_total", "Off");
  metrics::set_enabled(false);
  c.add(7);
  metrics::set_enabled(true);
  c.add(1);
  CHECK(c.value() == 1);
}

TEST_CASE("metrics: a module actor's calls, errors and latency; forks counted", "[actors][metrics]") {
  two_workers();
  const uint64_t forks_before = metrics::counter("troupe_tasks_total", "").value();
  ModuleActor<Adder> adder("test.adder");
  for (int i = 0; i < 5; ++i) CHECK(wait(fork(adder, i)) == i + 1);
  CHECK_THROWS_AS(wait(fork(adder, -1)), std::invalid_argument);
  const std::string text = metrics::exposition();
  CHECK(sample(text, "troupe_actor_calls_total{actor=\"test.adder\"}") == 6);
  CHECK(sample(text, "troupe_actor_errors_total{actor=\"test.adder\"}") == 1);
  CHECK(sample(text, "troupe_actor_mailbox_depth{actor=\"test.adder\"}") == 0);
  CHECK(sample(text, "troupe_actor_call_seconds_count{actor=\"test.adder\"}") == 6);
  CHECK(metrics::counter("troupe_tasks_total", "").value() - forks_before == 6);
}

TEST_CASE("metrics: the HTTP server answers GET /metrics, 404 elsewhere", "[actors][metrics]") {
  const int port = metrics::serving_port() ? metrics::serving_port() : metrics::serve("127.0.0.1", 0);
  REQUIRE(port > 0);
  metrics::counter("test_http_total", "Over HTTP").add(11);
  const std::string ok = http_get(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(ok.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(ok.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  CHECK(sample(ok.substr(ok.find("\r\n\r\n") + 4), "test_http_total") == 11);
  CHECK(http_get(port, "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0) == 0);
  CHECK(http_get(port, "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0) == 0);
}
