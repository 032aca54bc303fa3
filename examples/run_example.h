#pragma once
// Examples fail like commands: the error's message on stderr and exit status 1, never an abort
// (an uncaught exception would end the process with a core dump and no context).
//
//   int main(int argc, char** argv) {
//     return troupe::run_example("p2p_blocking", [&] { ...; return 0; });
//   }
#include <cstdio>
#include <exception>
#include <string>

namespace troupe {

template <class Body>
int run_example(const char* name, Body body) {
  try {
    return body();
  } catch (const std::exception& e) {
    // Messages that already name the example ("dist_sgd: ...") are not prefixed twice.
    const std::string prefix = std::string(name) + ": ";
    const bool named = std::string(e.what()).starts_with(prefix);
    std::fprintf(stderr, "%s%s\n", named ? "" : prefix.c_str(), e.what());
    return 1;
  }
}

}  // namespace troupe
