#pragma once
// The instruction set Troupe's CPU kernels run with, chosen once per process at run time. One
// build runs on every x86-64 CPU with AVX2 and FMA (the build's baseline, x86-64-v3); kernels
// for wider sets are compiled beside the AVX2 ones and picked here from what the CPU has.
// TROUPE_CPU_ISA=avx2|avx512|avx512_bf16|amx caps the choice (tests run the AVX2 kernels on an
// AVX-512 machine that way), and caps oneDNN's dispatch alike.
//
//   if (cpu_isa() >= CpuIsa::avx512) gemm_avx512(...); else gemm_avx2(...);
//   std::cout << cpu_isa_name(cpu_isa());   // "avx2"
#include <map>
#include <string>
#include <string_view>

namespace troupe {

// Ordered: each level has everything of the ones before it.
enum class CpuIsa {
  avx2,         // AVX2 + FMA + F16C (the baseline)
  avx512,       // + AVX-512 F, BW, DQ, VL
  avx512_bf16,  // + AVX512-BF16 (bf16 dot products)
  amx,          // + AMX-BF16 tiles
};

// The level kernels use: the CPU's own, or TROUPE_CPU_ISA's when lower. ValueError (first call)
// for a TROUPE_CPU_ISA this CPU lacks or does not know.
CpuIsa cpu_isa();
// The best level this CPU (and OS) offers, whatever TROUPE_CPU_ISA says.
CpuIsa cpu_isa_detected();
const char* cpu_isa_name(CpuIsa isa);
// What the host code was compiled for: "x86-64-v3" (runs on every AVX2 CPU) or "native".
const char* cpu_isa_build();
// The first processor's fields in /proc/cpuinfo ("model name" -> "AMD EPYC 7B13", "flags" -> ...),
// names and values trimmed; empty where the file cannot be read.
std::map<std::string, std::string> cpu_info();
// The CPU's model name as /proc/cpuinfo gives it ("AMD EPYC 7B13"), "unknown" without one.
std::string cpu_model_name();
// "avx2", "avx512", ... back to a level. ValueError naming the accepted names otherwise.
CpuIsa parse_cpu_isa(std::string_view name);

}  // namespace troupe
