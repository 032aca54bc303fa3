// Rank 0's host name that does not resolve (net/bootstrap/resolve.h): a bounded retry, then a CommError
// naming the variable and the name; never loopback and a rendezvous that hangs. Names under
// .invalid never resolve (RFC 6761).
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>

#include "devices/error.h"
#include "net/process_group.h"
#include "net/bootstrap/resolve.h"
#include "support/elapsed.h"
#include "support/scoped_env.h"
#include "support/thrown.h"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

TEST_CASE("resolve: addresses and names that resolve, at once", "[net][resolve]") {
  CHECK(net::detail::resolve_host("127.0.0.1", "MASTER_ADDR", 0s, deadline_after(5s)) == "127.0.0.1");
  CHECK(net::detail::resolve_host("localhost", "MASTER_ADDR", 0s, deadline_after(5s)) == "127.0.0.1");
  CHECK(net::detail::local_address_towards("127.0.0.1", 29500, "MASTER_ADDR=127.0.0.1") == "127.0.0.1");
  CHECK_FALSE(net::detail::try_resolve_host("rank0.troupe.invalid").has_value());
}

TEST_CASE("resolve: a name that never resolves is retried for the patience given, then named in a CommError",
          "[net][resolve]") {
  const auto started = Clock::now();
  const std::string m = thrown<CommError>(
      [] { net::detail::resolve_host("rank0.troupe.invalid", "MASTER_ADDR", 1500ms, deadline_after(60s)); });
  const double took = seconds_since(started);
  CHECK_THAT(m, Catch::Contains("MASTER_ADDR='rank0.troupe.invalid' does not resolve"));
  CHECK_THAT(m, Catch::Contains("TROUPE_RESOLVE_TIMEOUT"));
  CHECK(took > 1.0);
  CHECK(took < 5.0);
  // The rendezvous deadline bounds the retries too.
  const auto again = Clock::now();
  thrown<CommError>([] { net::detail::resolve_host("rank0.troupe.invalid", "MASTER_ADDR", 60s, deadline_after(500ms)); });
  CHECK(seconds_since(again) < 3.0);
}

TEST_CASE("resolve: init_process_group on rank 1 names MASTER_ADDR and the name, no hang", "[net][resolve]") {
  ScopedEnv addr("MASTER_ADDR", "rank0.troupe.invalid"), port("MASTER_PORT", "29511"),
      patience("TROUPE_RESOLVE_TIMEOUT", "1");
  InitOptions o;
  o.rank = 1;
  o.world_size = 2;
  o.timeout = 60s;
  const auto started = Clock::now();
  CHECK_THAT(thrown<CommError>([&] { init_process_group(o); }),
             Catch::Contains("MASTER_ADDR='rank0.troupe.invalid' does not resolve"));
  CHECK(seconds_since(started) < 5.0);

  o.init_method = "tcp://rank0.troupe.invalid:29511";
  CHECK_THAT(thrown<CommError>([&] { init_process_group(o); }),
             Catch::Contains("init_method='rank0.troupe.invalid' does not resolve"));

  ScopedEnv bad("TROUPE_RESOLVE_TIMEOUT", "soon");
  CHECK_THAT(thrown<ValueError>([&] { init_process_group(o); }), Catch::Contains("TROUPE_RESOLVE_TIMEOUT='soon'"));
}
