// The limits on what a connection may hold (net/limits.h): defaults, and each variable read and checked.
#include <catch2/catch.hpp>
#include <map>
#include <string>

#include "devices/error.h"
#include "net/limits.h"

using namespace troupe;
using namespace troupe::net;

namespace {
NetLimits parse(const std::map<std::string, std::string>& env) {
  return parse_net_limits([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}
}  // namespace

TEST_CASE("net limits: stated defaults, each replaced by its variable, bad values refused by name", "[net][limits]") {
  const NetLimits defaults = parse({});
  CHECK(defaults.max_frame_bytes == size_t{4} << 30);
  CHECK(defaults.handshake_timeout == std::chrono::milliseconds(10'000));
  CHECK(defaults.progress_timeout == std::chrono::milliseconds(30'000));
  CHECK(defaults.max_pending == 64);
  CHECK(defaults.send_stall_timeout == std::chrono::milliseconds(60'000));
  CHECK(defaults.max_registration_bytes == 64 << 10);

  const NetLimits set = parse({{"TROUPE_MAX_FRAME_BYTES", "1048576"},
                               {"TROUPE_HANDSHAKE_TIMEOUT_MS", "250"},
                               {"TROUPE_PROGRESS_TIMEOUT_MS", "500"},
                               {"TROUPE_MAX_PENDING", "8"},
                               {"TROUPE_SEND_STALL_TIMEOUT_MS", "700"},
                               {"TROUPE_MAX_REGISTRATION_BYTES", "4096"}});
  CHECK(set.max_frame_bytes == 1 << 20);
  CHECK(set.handshake_timeout == std::chrono::milliseconds(250));
  CHECK(set.progress_timeout == std::chrono::milliseconds(500));
  CHECK(set.max_pending == 8);
  CHECK(set.send_stall_timeout == std::chrono::milliseconds(700));
  CHECK(set.max_registration_bytes == 4096);

  CHECK(parse({{"TROUPE_MAX_PENDING", ""}}).max_pending == 64);  // empty: unset
  CHECK_THROWS_WITH(parse({{"TROUPE_HANDSHAKE_TIMEOUT_MS", "0"}}),
                    Catch::Contains("TROUPE_HANDSHAKE_TIMEOUT_MS='0', expected a positive integer"));
  CHECK_THROWS_AS(parse({{"TROUPE_MAX_FRAME_BYTES", "4G"}}), ValueError);
  CHECK_THROWS_AS(parse({{"TROUPE_MAX_PENDING", "-3"}}), ValueError);
  CHECK_THROWS_WITH(parse({{"TROUPE_MAX_PENDING", "100000"}}), Catch::Contains("at most 65536"));
}
