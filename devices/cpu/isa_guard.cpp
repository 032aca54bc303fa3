// Compiled for plain x86-64 (devices/CMakeLists.txt), so that it runs on any CPU: before anything
// else of Troupe runs, a CPU without the build's baseline (AVX2, FMA, BMI2, F16C: x86-64-v3) is
// told so in words, instead of stopping later at an illegal instruction.
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace {

void say(const char* text) {
  if (write(STDERR_FILENO, text, std::strlen(text)) < 0) return;
}

[[gnu::constructor(101)]] void require_baseline_isa() {
  __builtin_cpu_init();
  const char* missing = !__builtin_cpu_supports("avx2") ? "AVX2"
                        : !__builtin_cpu_supports("fma")  ? "FMA"
                        : !__builtin_cpu_supports("bmi2") ? "BMI2"
                        : !__builtin_cpu_supports("f16c") ? "F16C"
                                                          : nullptr;
  if (!missing) return;
  say("troupe: this CPU has no ");
  say(missing);
  say(": this build of Troupe needs an x86-64 CPU with AVX2 and FMA (x86-64-v3, Intel Haswell or AMD Zen "
      "and later)\n");
  std::_Exit(1);
}

}  // namespace
