#pragma once
// --json fields that name the CPU and the kernels a benchmark ran with, so that a figure always
// says where it came from.
//
//   print_json_line(with_cpu_kernels(nlohmann::ordered_json{{"serial_s", 0.61}}));
//   // {"serial_s":0.61,"cpu":"AMD EPYC 7B13","isa":"avx2","gemm":"onednn","gemm_packed":"avx2 6x16"}
#include <nlohmann/json.hpp>

#include "devices/cpu/gemm.h"
#include "devices/cpu/gemm_packed.h"
#include "devices/cpu/isa.h"

namespace troupe {

template <class Json>
Json with_cpu_kernels(Json line) {
  line["cpu"] = cpu_model_name();
  line["isa"] = cpu_isa_name(cpu_isa());
  line["gemm"] = gemm_choice().backend;
  line["gemm_packed"] = gemm_packed_kernel();
  return line;
}

}  // namespace troupe
