#pragma once
// Examples fail like commands: the error's message on stderr and exit status 1, never an abort
// (an uncaught exception would end the process with a core dump and no context).
//
//   int main(int argc, char** argv) {
//     return troupe::run_example("p2p_blocking", [&] { ...; return 0; });
//   }
#include <cstdio>
#include <exception>

namespace troupe {

template <class Body>
int run_example(const char* name, Body body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace troupe
