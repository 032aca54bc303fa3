// troupe info: what this build and this machine offer Troupe (text, or one JSON object with --json).
#include <cblas.h>
#include <sched.h>

#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.h>

#include "devices/backend.h"
#include "devices/cpu/gemm.h"
#include "devices/cpu/gemm_bf16.h"
#include "devices/cpu/gemm_packed.h"
#include "devices/cpu/isa.h"
#include "devices/cpu/kernel_choices.h"
#include "devices/determinism.h"
#include "devices/registry.h"
#include "devices/threads.h"
#include "net/stripes.h"
#include "net/transport.h"
#include "examples/troupe/commands.h"

namespace troupe::cli {

namespace {

using Json = nlohmann::ordered_json;

// The instruction sets Troupe's kernels (and oneDNN's) care about.
Json cpu_features() {
  __builtin_cpu_init();
  return Json{{"avx2", __builtin_cpu_supports("avx2") != 0},
              {"fma", __builtin_cpu_supports("fma") != 0},
              {"avx512f", __builtin_cpu_supports("avx512f") != 0},
              {"avx512bw", __builtin_cpu_supports("avx512bw") != 0},
              {"avx512vl", __builtin_cpu_supports("avx512vl") != 0},
              {"avx512bf16", __builtin_cpu_supports("avx512bf16") != 0},
              {"avx512vnni", __builtin_cpu_supports("avx512vnni") != 0},
              {"amx_bf16", __builtin_cpu_supports("amx-bf16") != 0}};
}

// The CPUs this process may run on, as ranges ("0-1", "0,2-3"): what srun, mpirun or taskset bound
// it to. Ranks of one host whose masks together give fewer CPUs than ranks wait without spinning
// (net/collectives/shm_all_reduce.h, net::busy_poll_for): a spinner would hold the CPU its peer needs.
std::string allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return "unknown";
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    int last = c;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
    out += (out.empty() ? "" : ",") + std::to_string(c) + (last > c ? "-" + std::to_string(last) : "");
    c = last;
  }
  return out;
}

// The widest instruction set oneDNN dispatches to here (avx512_core_amx: bf16 GEMMs on AMX tiles).
std::string onednn_isa() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx2: return "avx2";
    default: return "older than avx2";
  }
}

Json collect() {
  const dnnl_version_t* dnnl = dnnl_version();
  std::string dnnl_text = std::to_string(dnnl->major) + "." + std::to_string(dnnl->minor) + "." +
                          std::to_string(dnnl->patch);
  const GemmChoice& gemm = gemm_choice();
  Json cuda{{"available", has_backend(DeviceType::cuda)}};
  if (has_backend(DeviceType::cuda)) {
    DeviceBackend& b = backend(DeviceType::cuda);
    cuda["devices"] = b.device_count();
    cuda["description"] = b.describe();
  } else {
    cuda["reason"] = cuda_unavailable_reason();
  }
  // The transport's paths by frame size, as a process group here would take them (the variables
  // override). Stripes stay on by default: on the 2-core AMD EPYC they gave 1.55x at 64 MB between
  // two ranks of one host and cost nothing measurable with one CPU or between two hosts.
  const net::TransportOptions defaults;
  const auto env_or = [](const char* name, long long fallback) {
    const char* v = std::getenv(name);
    return v && *v ? std::atoll(v) : fallback;
  };
  // As chosen for a rank with a CPU of its own (connect() counts the host's ranks).
  const long long busy_poll_us = env_or("TROUPE_BUSY_POLL_US", net::busy_poll_for(1, hardware_cores()).count());
  const Json network{{"direct_max_bytes", env_or("TROUPE_DIRECT_MAX", static_cast<long long>(defaults.direct_max))},
                     {"stripes", env_or("TROUPE_STRIPES", defaults.stripes)},
                     {"stripe_min_bytes", env_or("TROUPE_STRIPE_MIN", static_cast<long long>(defaults.stripe_min))},
                     {"same_host_stripe_socket_buffer_bytes", net::same_host_socket_buffer()},
                     {"busy_poll_us", busy_poll_us},
                     {"small_collective_poll_us",
                      env_or("TROUPE_SMALL_COLLECTIVE_POLL_US",
                             busy_poll_us == 0 ? 0 : net::small_collective_poll_for(1, hardware_cores()).count())}};
  return Json{
      {"version", TROUPE_VERSION},
      {"network", network},
      {"cpu", {{"model", cpu_model_name()}, {"features", cpu_features()}}},
      {"isa",
       {{"build", cpu_isa_build()},
        {"detected", cpu_isa_name(cpu_isa_detected())},
        {"kernels", cpu_isa_name(cpu_isa())},
        {"gemm_packed", gemm_packed_kernel()}}},
      {"cores", hardware_cores()},
      {"cpu_affinity", allowed_cpus()},
      {"intra_op_threads", intra_op_threads()},
      {"deterministic_kernels", deterministic_kernels()},
      {"onednn", {{"version", dnnl_text}, {"hash", dnnl->hash ? dnnl->hash : ""}, {"isa", onednn_isa()}}},
      {"openblas", {{"config", openblas_get_config()}}},
      {"gemm",
       {{"backend", gemm.backend},
        {"reason", gemm.reason},
        {"onednn_gflops", gemm.onednn_gflops},
        {"openblas_gflops", gemm.openblas_gflops}}},
      {"gemm_bf16", gemm_bf16_path()},
      {"kernel_choices", {{"file", kernel_choices_file()}}},
      {"ops", OpRegistry::global().names().size()},
      {"cuda", cuda},
  };
}

void print_text(const Json& info) {
  auto row = [](const char* label) -> std::ostream& { return std::cout << std::left << std::setw(18) << label; };
  std::cout << "troupe " << info["version"].get<std::string>() << "\n";
  std::string have, lack;
  for (const auto& [feature, present] : info["cpu"]["features"].items())
    (present.get<bool>() ? have : lack) += " " + feature;
  row("cpu") << info["cpu"]["model"].get<std::string>() << "\n";
  row("cpu features") << (have.empty() ? " none" : have) << (lack.empty() ? "" : "  (lacks" + lack + ")") << "\n";
  const Json& isa = info["isa"];
  row("kernels") << isa["kernels"].get<std::string>() << " (this CPU offers " << isa["detected"].get<std::string>()
                 << "; TROUPE_CPU_ISA caps it), packed GEMM tile " << isa["gemm_packed"].get<std::string>()
                 << "; host code built for " << isa["build"].get<std::string>() << "\n";
  row("cores") << info["cores"] << ", intra-op threads " << info["intra_op_threads"]
               << (info["deterministic_kernels"].get<bool>() ? ", deterministic kernels" : "") << "\n";
  row("cpu affinity") << "CPUs " << info["cpu_affinity"].get<std::string>()
                      << ": ranks of one host spin-wait (busy-polls below, shared-memory collectives) while each rank "
                         "has a CPU, else wait without spinning; the ranks of one machine (all its network namespaces) "
                         "that fit its CPUs each wait on a CPU of their own (rank order)\n";
  const Json& network = info["network"];
  row("network") << "frames up to " << network["direct_max_bytes"].get<long long>() / 1024
                 << " KiB on a direct TCP link; from " << network["stripe_min_bytes"].get<long long>() / 1024
                 << " KiB over " << network["stripes"].get<long long>()
                 << " stripes (connections with a thread each; TROUPE_DIRECT_MAX, TROUPE_STRIPES, TROUPE_STRIPE_MIN); "
                    "stripes within this host use socket buffers of "
                 << network["same_host_stripe_socket_buffer_bytes"].get<long long>() / 1024
                 << " KiB (half the L2 cache), between hosts the kernel's\n";
  row("busy-poll") << "a waiting thread spins " << network["busy_poll_us"].get<long long>()
                   << " us after its last frame, the caller of a blocking collective that fits a direct frame "
                   << network["small_collective_poll_us"].get<long long>()
                   << " us from the start of each wait (TROUPE_BUSY_POLL_US, TROUPE_SMALL_COLLECTIVE_POLL_US)\n";
  row("oneDNN") << info["onednn"]["version"].get<std::string>() << " (" << info["onednn"]["hash"].get<std::string>()
                << "), dispatching " << info["onednn"]["isa"].get<std::string>() << "\n";
  row("OpenBLAS") << info["openblas"]["config"].get<std::string>() << "\n";
  row("bf16 products") << info["gemm_bf16"].get<std::string>() << "\n";
  const Json& gemm = info["gemm"];
  const std::string reason = gemm["reason"].get<std::string>();
  row("gemm") << gemm["backend"].get<std::string>() << ": " << reason;
  // The figures, unless the reason already quotes them (or nothing was measured).
  if (gemm["onednn_gflops"].get<double>() > 0 && reason.find("GFLOP") == std::string::npos)
    std::cout << std::fixed << std::setprecision(1) << " (oneDNN " << gemm["onednn_gflops"].get<double>()
              << " GFLOP/s, OpenBLAS " << gemm["openblas_gflops"].get<double>() << " GFLOP/s)";
  std::cout << "\n";
  const std::string choices = info["kernel_choices"]["file"].get<std::string>();
  row("kernel choices") << (choices.empty() ? "measured by every process (TROUPE_KERNEL_CACHE=off, or no home directory)"
                                            : "measured once on this machine, then kept in " + choices +
                                                  " (TROUPE_KERNEL_CACHE: a directory, or off)")
                        << "\n";
  row("ops") << info["ops"] << " registered (troupe op --list)\n";
  const Json& cuda = info["cuda"];
  if (cuda["available"].get<bool>())
    row("cuda") << cuda["description"].get<std::string>() << "\n";
  else
    row("cuda") << "none: " << cuda["reason"].get<std::string>() << "\n";
}

}  // namespace

Command add_info_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand("info", "Version, CPU, threads, kernel backends, GEMM choice, ops, CUDA");
  auto json = std::make_shared<bool>(false);
  app->add_flag("--json", *json, "Print one JSON object instead of text");
  return {app, [json] {
            const Json info = collect();
            if (*json)
              std::cout << info.dump(2) << "\n";
            else
              print_text(info);
            return 0;
          }};
}

}  // namespace troupe::cli
