#pragma once
// The tests' runtime: two workers (the CI machine's cores), shared by every test case of a test
// executable, since one explicit Runtime lives at a time.
#include "actors/runtime.h"

inline troupe::Runtime& two_workers() {
  static troupe::Runtime runtime({.workers = 2});
  return runtime;
}
