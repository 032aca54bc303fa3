// Ranks started by job engines instead of `troupe launch`: where rank 0's rendezvous is, from
// OpenMPI's and Slurm's variables (net/bootstrap/engine_env.h); a real `mpirun` running the collectives'
// rank test and all_reduce_bench, and a real `srun` on a one-node Slurm running the rank test and
// dist_sgd, with no Troupe launcher in between.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "devices/error.h"
#include "net/bootstrap/engine_env.h"
#include "net/bootstrap/launcher.h"
#include "support/ranks.h"
#include "support/skip.h"
#include "support/thrown.h"

using namespace troupe;
using namespace troupe::net;

namespace {

std::optional<net::detail::MasterAddress> master_in(const std::map<std::string, std::string>& env) {
  return net::detail::master_from_engine([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

// The directory of an executable on PATH, or empty.
std::string on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string rest = path ? path : "";
  while (!rest.empty()) {
    const size_t colon = rest.find(':');
    const std::string dir = rest.substr(0, colon);
    if (std::filesystem::exists(dir + "/" + program)) return dir;
    rest = colon == std::string::npos ? "" : rest.substr(colon + 1);
  }
  return "";
}

// Runs a command line as one process (the engine starts the ranks), without the variables the
// launcher would set, so that the ranks see only the engine's.
RankRun run_engine(std::vector<std::string> command) {
  LaunchOptions o;
  o.command = {"env", "-u", "RANK", "-u", "WORLD_SIZE", "-u", "LOCAL_RANK", "-u", "LOCAL_WORLD_SIZE",
               "-u", "MASTER_ADDR", "-u", "MASTER_PORT", "-u", "NODE_RANK"};
  o.command.insert(o.command.end(), command.begin(), command.end());
  return launch_collecting(o);
}

}  // namespace

TEST_CASE("engines: rank 0's address from OpenMPI's and Slurm's variables", "[net][engines]") {
  CHECK_FALSE(master_in({{"RANK", "0"}}).has_value());

  const std::map<std::string, std::string> mpi{{"OMPI_COMM_WORLD_SIZE", "2"},
                                               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                               {"OMPI_MCA_ess_base_jobid", "1432682497"}};
  auto m = master_in(mpi);
  REQUIRE(m.has_value());
  CHECK(m->engine == "OpenMPI");
  CHECK(m->host == "127.0.0.1");
  CHECK(m->port == 20000 + 1432682497 % 20000);
  auto over = mpi;
  over["MASTER_PORT"] = "31000";
  CHECK(master_in(over)->port == 31000);
  auto spans = mpi;
  spans["OMPI_COMM_WORLD_LOCAL_SIZE"] = "1";
  CHECK_THAT(thrown<ValueError>([&] { master_in(spans); }), Catch::Contains("mpirun -x MASTER_ADDR"));
  spans["MASTER_ADDR"] = "node1";
  CHECK(master_in(spans)->host == "node1");
  auto no_job = mpi;
  no_job.erase("OMPI_MCA_ess_base_jobid");
  CHECK_THAT(thrown<ValueError>([&] { master_in(no_job); }), Catch::Contains("MASTER_PORT"));

  std::map<std::string, std::string> slurm{{"SLURM_PROCID", "1"}, {"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "2"},
                                           {"SLURM_NNODES", "1"}, {"SLURM_STEP_NODELIST", "node07"}};
  m = master_in(slurm);
  REQUIRE(m.has_value());
  CHECK(m->engine == "Slurm");
  CHECK(m->host == "127.0.0.1");
  CHECK(m->port == 20000 + (77 * 64 + 2) % 20000);
  slurm["SLURM_NNODES"] = "3";
  slurm["SLURM_STEP_NODELIST"] = "gpu[07-09]";
  CHECK(master_in(slurm)->host == "gpu07");

  CHECK(net::detail::first_slurm_host("node[07-09,12],gpu1") == "node07");
  CHECK(net::detail::first_slurm_host("node3,node1") == "node3");
  CHECK(net::detail::first_slurm_host("rack[2,5]-n[10-11]") == "rack2-n10");
  CHECK(net::detail::first_slurm_host("solo") == "solo");
}

TEST_CASE("engines: mpirun starts the ranks, no troupe launcher in between", "[net][engines]") {
  if (on_path("mpirun").empty()) SKIP_TEST("no mpirun (apt-get install openmpi-bin)");
  const std::string bin = TROUPE_BIN_DIR;
  const std::vector<std::string> mpirun{"mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"};

  std::vector<std::string> ranks = mpirun;
  for (std::string& part : rank_command("collectives rank: all")) ranks.push_back(part);
  RankRun run = run_engine(ranks);
  INFO(run.digest());
  CHECK(run.result.exit_code == 0);
  CHECK(run.passed_ranks() == 2);

  std::vector<std::string> bench = mpirun;
  for (const char* part : {"/all_reduce_bench", "--sizes", "4,1048576", "--json"})
    bench.push_back(part[0] == '/' ? bin + part : part);
  run = run_engine(bench);
  INFO(run.output);
  CHECK(run.result.exit_code == 0);
  CHECK(run.count("\"bytes\":1048576") == 1);  // one JSON line per size, from rank 0
}

// A one-node Slurm made by scripts/slurm_one_node.sh (root, slurm-wlm, munge), then srun starts
// the ranks: the collectives' rank test and two ranks of dist_sgd on a subset of Fashion-MNIST.
TEST_CASE("engines: srun starts the ranks on a one-node Slurm, no troupe launcher in between", "[net][engines]") {
  if (::geteuid() != 0) SKIP_TEST("needs root to start slurmctld and slurmd");
  for (const char* program : {"srun", "slurmctld", "slurmd", "munged"})
    if (on_path(program).empty()) SKIP_TEST("no " << program << " (apt-get install slurm-wlm munge)");
  const std::string script = std::string(TROUPE_SOURCE_DIR) + "/scripts/slurm_one_node.sh";
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("troupe-slurm-" + std::to_string(::getpid()))).string();
  RankRun cluster = run_engine({script, "start", dir});
  struct Stop {
    std::string script, dir;
    ~Stop() { run_engine({script, "stop", dir}); }
  } stop{script, dir};
  // A machine where the daemons cannot run (a container without a resolvable hostname, ...) is one
  // where this test cannot run: say why, visibly.
  if (cluster.result.exit_code != 0) SKIP_TEST("the one-node Slurm did not start: " << cluster.output);
  const std::string conf = "SLURM_CONF=" + dir + "/slurm.conf";

  std::vector<std::string> ranks{"env", conf, "srun", "-n", "2"};
  for (std::string& part : rank_command("collectives rank: all")) ranks.push_back(part);
  RankRun run = run_engine(ranks);
  INFO(run.digest());
  CHECK(run.result.exit_code == 0);
  CHECK(run.passed_ranks() == 2);

  run = run_engine({"env", conf, "srun", "-n", "2", std::string(TROUPE_BIN_DIR) + "/dist_sgd", "--epochs", "1",
                    "--subset", "2048", "--json"});
  INFO(run.output);
  CHECK(run.result.exit_code == 0);
  CHECK(run.count("\"world\":2") == 1);
}
