// The network's errors (net/errors.h) are registered when the net library loads: they cross ranks
// and graph nodes as the same type, and a lost peer is a CommError too.
#include <catch2/catch.hpp>

#include <algorithm>

#include "devices/error_kinds.h"
#include "net/errors.h"

using namespace troupe;

TEST_CASE("net errors: registered, and they come back as the same type", "[net][errors]") {
  const auto kinds = registered_error_kinds();
  for (const char* kind : {"CommError", "PeerLostError"}) {
    INFO(kind);
    CHECK(std::find(kinds.begin(), kinds.end(), kind) != kinds.end());
  }
  const ErrorRecord lost = encode_error(std::make_exception_ptr(PeerLostError("rank 1 was lost")));
  CHECK(lost.kind == "PeerLostError");
  CHECK_THROWS_MATCHES(std::rethrow_exception(decode_error(ErrorRecord::parse(lost.serialize()))), PeerLostError,
                       Catch::Message("rank 1 was lost"));
  CHECK_THROWS_AS(std::rethrow_exception(decode_error({"PeerLostError", "m"})), CommError);
  CHECK_THROWS_MATCHES(std::rethrow_exception(decode_error({"CommError", "frame: malformed"})), CommError,
                       Catch::Message("frame: malformed"));
  // A subclass keeps its own type through with_context, not its base's.
  CHECK_THROWS_AS(std::rethrow_exception(with_context("x: ", std::make_exception_ptr(PeerLostError("rank 1")))),
                  PeerLostError);
}
