// examples/tcp_floor: the plain-TCP floor that the network figures are read against. Two real
// processes under `troupe launch`, every byte they receive checked by the tool itself.
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

TEST_CASE("tcp_floor: a rank it cannot place or an address that does not resolve is a clear error", "[net][tcp_floor]") {
  auto run = [](const std::string& env) {
    std::string output;
    FILE* pipe = ::popen((env + " " + tcp_floor() + " 2>&1").c_str(), "r");
    REQUIRE(pipe);
    char buffer[256];
    while (std::fgets(buffer, sizeof buffer, pipe)) output += buffer;
    return std::make_pair(::pclose(pipe), output);
  };
  const auto [bad_rank, rank_text] = run("RANK=2");
  CHECK(bad_rank != 0);
  CHECK_THAT(rank_text, Catch::Contains("RANK 2: two ranks, 0 and 1"));
  const auto [bad_address, address_text] = run("RANK=1 MASTER_ADDR=no-such-host.invalid");
  CHECK(bad_address != 0);
  CHECK_THAT(address_text, Catch::Contains("MASTER_ADDR no-such-host.invalid does not resolve"));
}
