// /metrics of a running 2-rank job, scraped by a real HTTP client (python3's urllib) and read by
// Prometheus' own text parser (prometheus_client, Debian's python3-prometheus-client): rank 1
// hosts an actor, rank 0 calls it and scrapes both ranks while rank 1 still serves.
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "devices/ops.h"
#include "net/collectives.h"
#include "net/bootstrap/launcher.h"
#include "net/remote/remote_actor.h"
#include "support/ranks.h"
#include "support/skip.h"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

constexpr int kCalls = 40;
constexpr int kFailures = 2;
constexpr int64_t kFloats = 1000;

// The first python3 that has prometheus_client: pyenv's python3 may come first on PATH while
// Debian's package installs for /usr/bin/python3. Empty: none.
std::string python_with_parser() {
  for (const char* python : {"python3", "/usr/bin/python3"}) {
    const std::string probe = std::string(python) + " -c 'import prometheus_client.parser' >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return python;
  }
  return "";
}

nlohmann::json scrape(const std::string& python, const std::vector<int>& ports) {
  std::string command = python + " " TROUPE_SOURCE_DIR "/tests/support/scrape_metrics.py";
  for (int port : ports) command += " http://127.0.0.1:" + std::to_string(port) + "/metrics";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  REQUIRE(pipe);
  std::string out;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe.get())) out.append(buffer, n);
  INFO(command << " printed: " << out.substr(0, 2000));
  REQUIRE(!out.empty());
  return nlohmann::json::parse(out);
}

// Sum of the samples named `name` whose labels include every pair of `having`.
double total(const nlohmann::json& samples, const std::string& name, const nlohmann::json& having = nlohmann::json::object()) {
  double sum = 0;
  for (const auto& s : samples) {
    if (s["name"] != name) continue;
    bool match = true;
    for (const auto& [k, v] : having.items()) match = match && s["labels"].contains(k) && s["labels"][k] == v;
    if (match) sum += s["value"].get<double>();
  }
  return sum;
}

int metrics_port() { return std::atoi(std::getenv("TROUPE_METRICS_PORT")); }

class Tally {
 public:
  int64_t add(const Tensor& x) {
    if (x.numel() != kFloats) throw ShapeError("tally: want f32[" + std::to_string(kFloats) + "]");
    return ++calls_;
  }

 private:
  int64_t calls_ = 0;
};

// A port P with P + 1 free too (rank r serves on P + r).
int two_free_ports() {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int port = free_tcp_port();
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port + 1));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
    ::close(fd);
    if (free) return port;
  }
  FAIL("no two consecutive free ports");
  return 0;
}

}  // namespace

TEST_CASE("metrics rank: scraped while the job runs", "[.rank]") {
  InitOptions o;
  o.timeout = 30s;
  auto world = init_process_group(o);
  for (int i = 0; i < 3; ++i) {
    Tensor t = Tensor::ones({1024});
    all_reduce(*world, t);
  }
  RemoteActors actors(world);
  if (world->rank() == 1) {
    host("metrics.tally", std::make_shared<Tally>(), Method{"add", &Tally::add});
    CHECK_NOTHROW(serve());  // until rank 0 is done
    return;
  }
  RemoteActor tally = lookup("metrics.tally", 10s);
  for (int i = 0; i < kCalls; ++i) CHECK(tally.request<int64_t>("add", Tensor::ones({kFloats})).get() == i + 1);
  for (int i = 0; i < kFailures; ++i) CHECK_THROWS_AS(tally.request<int64_t>("add", Tensor::ones({3})).get(), ShapeError);

  const std::string python = std::getenv("TROUPE_TEST_PYTHON");
  const int port = metrics_port();
  const nlohmann::json scraped = scrape(python, {port, port + 1});
  const auto& rank0 = scraped["http://127.0.0.1:" + std::to_string(port) + "/metrics"];
  const auto& rank1 = scraped["http://127.0.0.1:" + std::to_string(port + 1) + "/metrics"];

  // The hosted actor's calls, counted where they ran (rank 1).
  const nlohmann::json actor = {{"actor", "metrics.tally"}};
  CHECK(total(rank1, "troupe_actor_calls_total", actor) == kCalls + kFailures);
  CHECK(total(rank1, "troupe_actor_errors_total", actor) == kFailures);
  CHECK(total(rank1, "troupe_actor_call_seconds_count", actor) == kCalls + kFailures);
  CHECK(total(rank1, "troupe_actor_call_seconds_bucket", {{"actor", "metrics.tally"}, {"le", "+Inf"}}) ==
        kCalls + kFailures);
  CHECK(total(rank1, "troupe_actor_call_seconds_sum", actor) > 0);
  CHECK(total(rank1, "troupe_actor_mailbox_depth", actor) == 0);

  // The calls' tensors both ways over the link, headers included: more than the payloads.
  const double payload = double(kCalls) * kFloats * 4;
  CHECK(total(rank0, "troupe_transport_sent_bytes_total", {{"peer", "1"}}) > payload);
  CHECK(total(rank0, "troupe_transport_sent_frames_total", {{"peer", "1"}}) >= kCalls + kFailures);
  CHECK(total(rank1, "troupe_transport_received_bytes_total", {{"peer", "0"}}) > payload);
  CHECK(total(rank1, "troupe_transport_received_frames_total", {{"peer", "0"}}) >= kCalls + kFailures);

  // Three all_reduces of f32[1024] on each rank, with the algorithm that ran.
  for (const auto* samples : {&rank0, &rank1}) {
    CHECK(total(*samples, "troupe_collective_calls_total", {{"collective", "all_reduce"}}) == 3);
    CHECK(total(*samples, "troupe_collective_bytes_total", {{"collective", "all_reduce"}}) == 3 * 4096);
    CHECK(total(*samples, "troupe_collective_seconds_count", {{"collective", "all_reduce"}}) == 3);
    CHECK(total(*samples, "troupe_process_resident_memory_bytes") > 1e6);
    CHECK(total(*samples, "troupe_restarts_total") == 0);
  }
  bool algorithm_named = false;
  for (const auto& s : rank0)
    if (s["name"] == "troupe_collective_calls_total" && s["labels"]["algorithm"] != "local") algorithm_named = true;
  CHECK(algorithm_named);

  // GET /ranks: every rank's endpoint, from the rendezvous (what `troupe top --job` reads).
  const std::string get_ranks = python + " -c 'import urllib.request as u; print(u.urlopen(\"http://127.0.0.1:" +
                                std::to_string(port) + "/ranks\").read().decode(), end=\"\")'";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(get_ranks.c_str(), "r"), pclose);
  REQUIRE(pipe);
  std::string listed;
  char buffer[512];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe.get())) listed.append(buffer, n);
  CHECK(listed == "127.0.0.1:" + std::to_string(port) + "\n127.0.0.1:" + std::to_string(port + 1) + "\n");
}

TEST_CASE("metrics: /metrics of a running 2-rank job parses with prometheus_client and counts the calls",
          "[net][metrics]") {
  const std::string python = python_with_parser();
  if (python.empty()) SKIP_TEST("no python3 with prometheus_client (apt install python3-prometheus-client)");
  LaunchOptions o;
  o.env = {{"TROUPE_METRICS_PORT", std::to_string(two_free_ports())}, {"TROUPE_TEST_PYTHON", python}};
  RankRun run = run_ranks(2, "metrics rank: scraped while the job runs", o);
  check_all_passed(run, 2);
}
