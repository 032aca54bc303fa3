// examples/tcp_floor: the plain-TCP floor that the network figures are read against. Two real
// processes under `troupe launch`, every byte they receive checked by the tool itself.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "support/ranks.h"

namespace {

std::string tcp_floor() { return std::string(TROUPE_BIN_DIR) + "/tcp_floor"; }

}  // namespace

TEST_CASE("tcp_floor: two ranks exchange 4 bytes and stream 64 MB over plain TCP", "[net][tcp_floor]") {
  troupe::net::LaunchOptions o;
  o.nproc = 2;
  o.command = {tcp_floor(), "--reps", "5", "--streams", "3", "--stream-reps", "2", "--json"};
  const RankRun run = launch_collecting(o);
  INFO(run.output);
  REQUIRE(run.result.exit_code == 0);
  const size_t open = run.output.find('{');
  REQUIRE(open != std::string::npos);
  const auto figures = nlohmann::json::parse(run.output.substr(open, run.output.find('}', open) - open + 1));
  CHECK(figures.at("exchange_us_4B").get<double>() > 0);
  CHECK(figures.at("stream_gbs_64MB").get<double>() > 0);
  CHECK(figures.at("streams").get<int>() == 3);
}

TEST_CASE("tcp_floor: a rank it cannot place, an address that does not resolve or a peer that never comes is a clear error",
          "[net][tcp_floor]") {
  auto run = [](const std::string& env, const std::string& args = "") {
    std::string output;
    FILE* pipe = ::popen((env + " " + tcp_floor() + " " + args + " 2>&1").c_str(), "r");
    REQUIRE(pipe);
    char buffer[256];
    while (std::fgets(buffer, sizeof buffer, pipe)) output += buffer;
    return std::make_pair(::pclose(pipe), output);
  };
  const auto [bad_rank, rank_text] = run("RANK=2");
  CHECK(bad_rank != 0);
  CHECK_THAT(rank_text, Catch::Contains("RANK 2: two ranks, 0 and 1"));
  const auto [not_a_rank, not_a_rank_text] = run("RANK=one");
  CHECK(not_a_rank != 0);
  CHECK_THAT(not_a_rank_text, Catch::Contains("RANK one: two ranks, 0 and 1"));
  const auto [bad_address, address_text] = run("RANK=1 MASTER_ADDR=no-such-host.invalid");
  CHECK(bad_address != 0);
  CHECK_THAT(address_text, Catch::Contains("MASTER_ADDR no-such-host.invalid does not resolve"));
  // Rank 0 alone, on a port the kernel just had free: nobody dials, and it says so instead of waiting.
  const int probe = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(probe, reinterpret_cast<sockaddr*>(&any), sizeof any) == 0);
  socklen_t length = sizeof any;
  ::getsockname(probe, reinterpret_cast<sockaddr*>(&any), &length);
  ::close(probe);
  const std::string port = std::to_string(ntohs(any.sin_port));
  const auto [lonely, lonely_text] = run("RANK=0 MASTER_PORT=" + port, "--timeout 1");
  CHECK(lonely != 0);
  CHECK_THAT(lonely_text, Catch::Contains("rank 1 did not connect to 127.0.0.1:" + port + " in 1 s"));
}
