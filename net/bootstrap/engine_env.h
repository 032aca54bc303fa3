#pragma once
// Where rank 0's rendezvous is when a job engine started the ranks instead of `troupe launch`:
// mpirun (OpenMPI) and srun (Slurm) set each rank's number, not a master address. Internal to
// net/ (init_process_group's env://).
//
//   std::optional<MasterAddress> m = master_from_engine(getenv);   // nullopt: no engine's variables
//
// - MASTER_ADDR / MASTER_PORT, when set, win (`mpirun -x MASTER_ADDR=node1 ...`).
// - Address: 127.0.0.1 when the job has one node (OpenMPI: OMPI_COMM_WORLD_LOCAL_SIZE equals
//   OMPI_COMM_WORLD_SIZE; Slurm: SLURM_NNODES is 1). Across Slurm nodes, the first host of
//   SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST), where srun's block distribution puts rank 0.
//   Across OpenMPI nodes there is no such rule: ValueError asking for MASTER_ADDR.
// - Port: derived from the job's id (OpenMPI: OMPI_MCA_ess_base_jobid; Slurm: SLURM_JOB_ID and
//   SLURM_STEP_ID), the same on every rank, in [20000, 40000). Two jobs on one host may collide:
//   then the rendezvous names the port, and MASTER_PORT picks another.
#include <functional>
#include <optional>
#include <string>

namespace troupe::net::detail {

struct MasterAddress {
  std::string host;
  int port = 0;
  std::string engine;  // "OpenMPI", "Slurm": for messages
  std::string from;    // the variable host came from ("MASTER_ADDR", "SLURM_STEP_NODELIST", ...): for messages
};

// getenv: the environment to read (a parameter so that tests can give one).
std::optional<MasterAddress> master_from_engine(const std::function<const char*(const char*)>& getenv);

// The first host of a Slurm hostlist: "node[07-09,12],gpu1" -> "node07".
std::string first_slurm_host(const std::string& hostlist);

}  // namespace troupe::net::detail
