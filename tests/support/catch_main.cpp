// The one translation unit that compiles Catch2's runner; every test executable links it.
//
// The op and model tests run a second time with the kernels capped at a lower instruction set:
// tests/CMakeLists.txt's troupe_tests_at_isa sets TROUPE_TEST_ISA_PASS, and the runner caps the
// kernels with TROUPE_CPU_ISA (its ranks inherit it). On a CPU whose best set is that one already,
// the pass would run the very kernels of the first: it says so and ctest reports it skipped.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>

#include "devices/cpu/isa.h"

int main(int argc, char** argv) {
  if (const char* pass = std::getenv("TROUPE_TEST_ISA_PASS")) {
    const troupe::CpuIsa capped = troupe::parse_cpu_isa(pass);
    if (troupe::cpu_isa_detected() <= capped) {
      std::printf("SKIPPED: this CPU's best instruction set is %s: the run at %s is the first run\n",
                  troupe::cpu_isa_name(troupe::cpu_isa_detected()), pass);
      return 0;
    }
    setenv("TROUPE_CPU_ISA", pass, 1);
  }
  return Catch::Session().run(argc, argv);
}
