#pragma once
// A test that cannot run here (no GPU, no root, a missing program) says why and returns; ctest
// reports it as skipped, never as passed: "SKIPPED:" is the SKIP_REGULAR_EXPRESSION that
// tests/CMakeLists.txt gives every test case.
//
//   if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU: " << cuda_unavailable_reason());
//
// Skip before any check: ctest takes the marker for a skip whatever else the test printed, failures
// included. Catch2 v2 has no SKIP of its own; run directly, the test executable shows the reason as
// a warning and goes on with the other test cases.
#include <catch2/catch.hpp>

#define SKIP_TEST(why)          \
  do {                          \
    WARN("SKIPPED: " << why);   \
    return;                     \
  } while (false)
