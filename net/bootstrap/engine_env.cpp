#include "net/bootstrap/engine_env.h"

#include <cstdint>

#include "devices/error.h"

namespace troupe::net::detail {

namespace {

constexpr int kFirstPort = 20000, kPorts = 20000;

std::optional<uint64_t> number(const char* text) {
  if (!text || !*text) return std::nullopt;
  uint64_t v = 0;
  for (const char* c = text; *c; ++c) {
    if (*c < '0' || *c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(*c - '0');
  }
  return v;
}

int port_of(uint64_t job) { return kFirstPort + static_cast<int>(job % kPorts); }

}  // namespace

std::string first_slurm_host(const std::string& hostlist) {
  // The first entry ends at a comma outside brackets; its range "[07-09,12]" yields its first number.
  std::string host;
  for (size_t i = 0; i < hostlist.size(); ++i) {
    const char c = hostlist[i];
    if (c == ',') break;
    if (c != '[') {
      host += c;
      continue;
    }
    const size_t end = hostlist.find_first_of("-,]", i + 1);
    if (end == std::string::npos) break;
    host += hostlist.substr(i + 1, end - i - 1);
    const size_t close = hostlist.find(']', i);
    if (close == std::string::npos) break;
    i = close;
  }
  return host;
}

std::optional<MasterAddress> master_from_engine(const std::function<const char*(const char*)>& getenv) {
  auto text = [&](const char* name) -> std::string {
    const char* v = getenv(name);
    return v ? v : "";
  };
  MasterAddress m;
  if (!text("OMPI_COMM_WORLD_SIZE").empty()) {
    m.engine = "OpenMPI";
    const auto job = number(getenv("OMPI_MCA_ess_base_jobid"));
    if (!job) throw ValueError("init_process_group: OpenMPI set no numeric OMPI_MCA_ess_base_jobid; set MASTER_PORT");
    m.port = port_of(*job);
    if (text("OMPI_COMM_WORLD_LOCAL_SIZE") != text("OMPI_COMM_WORLD_SIZE") && text("MASTER_ADDR").empty())
      throw ValueError("init_process_group: the OpenMPI job spans nodes (OMPI_COMM_WORLD_SIZE=" +
                       text("OMPI_COMM_WORLD_SIZE") + ", " + text("OMPI_COMM_WORLD_LOCAL_SIZE") +
                       " here): pass rank 0's host, `mpirun -x MASTER_ADDR=<host> ...`");
    m.host = "127.0.0.1";
    m.from = "OMPI_COMM_WORLD_LOCAL_SIZE (one node)";
  } else if (!text("SLURM_PROCID").empty()) {
    m.engine = "Slurm";
    const auto job = number(getenv("SLURM_JOB_ID"));
    if (!job) throw ValueError("init_process_group: Slurm set no numeric SLURM_JOB_ID; set MASTER_PORT");
    m.port = port_of(*job * 64 + number(getenv("SLURM_STEP_ID")).value_or(0));
    const char* list = !text("SLURM_STEP_NODELIST").empty() ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
    const std::string nodes = text(list);
    if (number(getenv("SLURM_NNODES")).value_or(0) == 1 || nodes.empty()) {
      m.host = "127.0.0.1";
      m.from = "SLURM_NNODES (one node)";
    } else {
      m.from = list;
      m.host = first_slurm_host(nodes);
      if (m.host.empty()) throw ValueError("init_process_group: no host in Slurm's node list '" + nodes + "'; set MASTER_ADDR");
    }
  } else {
    return std::nullopt;
  }
  if (const std::string host = text("MASTER_ADDR"); !host.empty()) {
    m.host = host;
    m.from = "MASTER_ADDR";
  }
  if (const auto port = number(getenv("MASTER_PORT"))) m.port = static_cast<int>(*port);
  return m;
}

}  // namespace troupe::net::detail
