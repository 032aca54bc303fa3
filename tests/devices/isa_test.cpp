#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "devices/cpu/gemm_packed.h"
#include "devices/cpu/isa.h"
#include "devices/error.h"

using namespace troupe;

TEST_CASE("cpu isa: the kernels' level is one this CPU offers, named and parsed both ways", "[isa]") {
  const CpuIsa used = cpu_isa(), detected = cpu_isa_detected();
  CHECK(used <= detected);
  CHECK(detected >= CpuIsa::avx2);  // the build's baseline: the library refuses to load below it
  for (CpuIsa isa : {CpuIsa::avx2, CpuIsa::avx512, CpuIsa::avx512_bf16, CpuIsa::amx})
    CHECK(parse_cpu_isa(cpu_isa_name(isa)) == isa);
  CHECK_THROWS_AS(parse_cpu_isa("sse2"), ValueError);
  CHECK_THROWS_WITH(parse_cpu_isa("avx-512"), Catch::Contains("avx2, avx512, avx512_bf16 or amx") &&
                                                  Catch::Contains("'avx-512'"));
  const std::string build = cpu_isa_build();
  CHECK((build == "x86-64-v3" || build == "native"));
  CHECK(!cpu_model_name().empty());
}

TEST_CASE("cpu isa: TROUPE_CPU_ISA caps the kernels and their packed GEMM tile", "[isa]") {
  const char* env = std::getenv("TROUPE_CPU_ISA");
  if (env && *env) CHECK(cpu_isa() == parse_cpu_isa(env));
  const std::string tile = gemm_packed_kernel();
  CHECK(tile == (cpu_isa() >= CpuIsa::avx512 ? "avx512 6x64" : "avx2 6x16"));
}

TEST_CASE("cpu isa: a weight cannot be packed for a wider ISA than the CPU has", "[isa][gemm]") {
  if (cpu_isa_detected() == CpuIsa::amx) return;  // every level is available: nothing to refuse
  const CpuIsa beyond = static_cast<CpuIsa>(static_cast<int>(cpu_isa_detected()) + 1);
  const std::vector<float> w(16 * 4, 1.0f);
  CHECK_THROWS_WITH(PackedWeight(w.data(), 16, 4, 4, beyond),
                    Catch::Contains("PackedWeight") && Catch::Contains(cpu_isa_name(beyond)));
}
