#pragma once
// The message of an expected exception, for checks on what it says, from a call that must run
// once (a receive, a collective: Catch's CHECK_THROWS_WITH would run it a second time).
//
//   const std::string m = thrown<TimeoutError>([&] { world.recv(t, 1, 7, 300ms); });
//   CHECK_THAT(m, Catch::Contains("tag 7"));
//
// A call that throws nothing, or an exception of another type, is a failed check and gives "".
#include <catch2/catch.hpp>
#include <exception>
#include <typeinfo>
#include <string>

template <class E, class F>
std::string thrown(F&& call) {
  try {
    call();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK("expected " << typeid(E).name() << ", got another exception: " << e.what());
    return "";
  }
  FAIL_CHECK("expected " << typeid(E).name() << ", got no exception");
  return "";
}
