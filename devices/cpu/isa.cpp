#include "devices/cpu/isa.h"

#include <oneapi/dnnl/dnnl.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "devices/error.h"

namespace troupe {

namespace {

constexpr const char* kNames[] = {"avx2", "avx512", "avx512_bf16", "amx"};

CpuIsa detect() {
  __builtin_cpu_init();  // GCC's checks include the OS's support of the AVX-512 and AMX state
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  if (!avx512) return CpuIsa::avx2;
  if (!__builtin_cpu_supports("avx512bf16")) return CpuIsa::avx512;
  if (!__builtin_cpu_supports("amx-bf16") || !__builtin_cpu_supports("amx-tile")) return CpuIsa::avx512_bf16;
  return CpuIsa::amx;
}

// oneDNN dispatches on its own; a lower Troupe level caps it too, so that a forced run exercises
// the same lower kernels everywhere. Only possible before oneDNN's first primitive.
void cap_onednn(CpuIsa isa) {
  if (isa == cpu_isa_detected()) return;
  const dnnl_cpu_isa_t cap = isa == CpuIsa::avx2 ? dnnl_cpu_isa_avx2
                           : isa == CpuIsa::avx512 ? dnnl_cpu_isa_avx512_core
                           : isa == CpuIsa::avx512_bf16 ? dnnl_cpu_isa_avx512_core_bf16
                                                        : dnnl_cpu_isa_all;
  dnnl_set_max_cpu_isa(cap);
}

CpuIsa choose() {
  const CpuIsa detected = cpu_isa_detected();
  const char* env = std::getenv("TROUPE_CPU_ISA");
  if (!env || !*env) return detected;
  const CpuIsa wanted = parse_cpu_isa(env);
  if (wanted > detected)
    throw ValueError(std::string("TROUPE_CPU_ISA=") + env + ": this CPU offers " + cpu_isa_name(detected) +
                     " at most");
  cap_onednn(wanted);
  return wanted;
}

// Chosen while the library loads, before any kernel (or oneDNN primitive) runs; a bad
// TROUPE_CPU_ISA is reported by the first cpu_isa() call instead.
struct Choice {
  bool valid = false;
  CpuIsa isa = CpuIsa::avx2;
  std::string error;
  Choice() {
    try {
      isa = choose();
      valid = true;
    } catch (const ValueError& e) {
      error = e.what();
    }
  }
};
const Choice& choice() {
  static const Choice made;
  return made;
}
[[maybe_unused]] const bool chosen_at_load = (choice(), true);

}  // namespace

CpuIsa cpu_isa_detected() {
  static const CpuIsa detected = detect();
  return detected;
}

CpuIsa cpu_isa() {
  const Choice& made = choice();
  if (!made.valid) throw ValueError(made.error);
  return made.isa;
}

std::map<std::string, std::string> cpu_info() {
  const auto trim = [](const std::string& s) {
    const size_t first = s.find_first_not_of(" \t"), last = s.find_last_not_of(" \t");
    return first == std::string::npos ? std::string() : s.substr(first, last - first + 1);
  };
  std::map<std::string, std::string> fields;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line) && !line.empty();) {  // a blank line ends the block
    const size_t colon = line.find(':');
    if (colon != std::string::npos) fields.emplace(trim(line.substr(0, colon)), trim(line.substr(colon + 1)));
  }
  return fields;
}

std::string cpu_model_name() {
  const auto fields = cpu_info();
  const auto name = fields.find("model name");
  return name == fields.end() || name->second.empty() ? "unknown" : name->second;
}

const char* cpu_isa_build() { return TROUPE_HOST_ARCH; }

const char* cpu_isa_name(CpuIsa isa) { return kNames[static_cast<int>(isa)]; }

CpuIsa parse_cpu_isa(std::string_view name) {
  for (int i = 0; i < 4; ++i)
    if (name == kNames[i]) return static_cast<CpuIsa>(i);
  throw ValueError("cpu isa: expected avx2, avx512, avx512_bf16 or amx, got '" + std::string(name) + "'");
}

}  // namespace troupe
