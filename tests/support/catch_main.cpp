// The one translation unit that compiles Catch2's runner; every test executable links it.
//
// The op and model tests run a second time with the kernels capped at a lower instruction set:
// tests/CMakeLists.txt's troupe_tests_at_isa sets TROUPE_TEST_ISA_PASS, and the runner starts
// itself again with TROUPE_CPU_ISA set to it (the libraries choose their kernels as they load,
// before main; its ranks inherit it). On a CPU whose best set is that one already, the pass would
// run the very kernels of the first: it says so and ctest reports it skipped.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <unistd.h>

#include "devices/cpu/isa.h"

int main(int argc, char** argv) {
  if (const char* pass = std::getenv("TROUPE_TEST_ISA_PASS")) {
    const troupe::CpuIsa capped = troupe::parse_cpu_isa(pass);
    if (troupe::cpu_isa_detected() <= capped) {
      std::printf("SKIPPED: this CPU's best instruction set is %s: the run at %s is the first run\n",
                  troupe::cpu_isa_name(troupe::cpu_isa_detected()), pass);
      return 0;
    }
    if (troupe::cpu_isa() != capped) {
      const char* set = std::getenv("TROUPE_CPU_ISA");
      if (set && std::string(set) == pass) {  // set, and still not taken: the pass would test nothing new
        std::fprintf(stderr, "TROUPE_CPU_ISA=%s: the kernels run at %s\n", pass, troupe::cpu_isa_name(troupe::cpu_isa()));
        return 1;
      }
      setenv("TROUPE_CPU_ISA", pass, 1);
      execv("/proc/self/exe", argv);
      std::perror("TROUPE_TEST_ISA_PASS: starting the runner again");
      return 1;
    }
  }
  return Catch::Session().run(argc, argv);
}
