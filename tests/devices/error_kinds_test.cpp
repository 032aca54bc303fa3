// The error-kind table: every registered kind comes back as its own type, with context and
// across the wire form; what is not a troupe error travels as Error.
#include <catch2/catch.hpp>

#include "devices/error_kinds.h"

using namespace troupe;

namespace {

std::string kind_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& x) {
    return x.kind();
  } catch (...) {
    return "not a troupe::Error";
  }
}

std::string what_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
}

}  // namespace

TEST_CASE("every registered error kind decodes to a type of that kind") {
  const auto kinds = registered_error_kinds();
  for (const char* expected : {"Error", "ShapeError", "DTypeError", "DeviceError", "IndexError", "ValueError",
                               "IOError", "TimeoutError", "CancelledError"})  // the network's: tests/net/errors_test.cpp
    CHECK(std::find(kinds.begin(), kinds.end(), expected) != kinds.end());
  for (const auto& kind : kinds) {
    INFO(kind);
    const std::exception_ptr e = decode_error({kind, "m"});
    CHECK(kind_of(e) == kind);
    CHECK(what_of(e) == "m");
    const ErrorRecord back = ErrorRecord::parse(encode_error(e).serialize());
    CHECK(back.kind == kind);
    CHECK(back.message == "m");
  }
}

TEST_CASE("with_context keeps the type and puts the place in front") {
  const auto e = with_context("node 'h' (matmul): ", std::make_exception_ptr(ShapeError("inner dims differ")));
  CHECK_THROWS_AS(std::rethrow_exception(e), ShapeError);
  CHECK(what_of(e) == "node 'h' (matmul): inner dims differ");
  // A subclass keeps its own type, not its base's: tests/net/errors_test.cpp (PeerLostError).
  // Cancellation is not re-worded: every node it reaches would add its name.
  const auto cancelled = std::make_exception_ptr(CancelledError("invocation 3 was cancelled"));
  CHECK(with_context("x: ", cancelled) == cancelled);
}

TEST_CASE("errors that are not troupe's travel as Error") {
  const ErrorRecord r = encode_error(std::make_exception_ptr(std::runtime_error("disk full")));
  CHECK(r.kind == "Error");
  CHECK(r.message == "disk full");
  CHECK(encode_error(std::make_exception_ptr(42)).message == "unknown exception");
  const auto unknown = decode_error({"MysteryError", "boom"});
  CHECK(kind_of(unknown) == "Error");
  CHECK(what_of(unknown) == "(MysteryError) boom");
}

TEST_CASE("error records: malformed bytes and a kind registered twice are errors") {
  CHECK_THROWS_AS(ErrorRecord::parse("no separator"), ValueError);
  CHECK_THROWS_AS(ErrorRecord::parse(std::string("\0message", 8)), ValueError);
  CHECK(ErrorRecord::parse(std::string("ShapeError\0", 11)).message.empty());
  CHECK_THROWS_WITH(register_error_kind("ShapeError", nullptr), Catch::Contains("registered twice"));
}
