// dist_sgd under `troupe launch --max-restarts`: rank 1 killed (SIGKILL) in the middle of training,
// every rank restarted, training resumed from the last checkpoint all ranks have, and the weights at
// the end bitwise those of an uninterrupted run (deterministic kernels: a busy machine would
// otherwise time conv2d's layouts differently in the two runs). scripts/restart_trials.sh runs 20 such trials at
// random moments.
#include <dirent.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>

#include "net/bootstrap/launcher.h"

namespace fs = std::filesystem;
using troupe::net::LaunchOptions;

namespace {

// The pid of this process's child whose environment has RANK=rank, or -1.
int child_with_rank(int rank) {
  DIR* proc = ::opendir("/proc");
  int found = -1;
  while (dirent* entry = proc ? ::readdir(proc) : nullptr) {
    const int pid = std::atoi(entry->d_name);
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    int ppid = 0;
    char state = 0;
    if (close == std::string::npos || std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) != 2) continue;
    if (ppid != ::getpid()) continue;
    std::ifstream environ("/proc/" + std::to_string(pid) + "/environ");
    std::stringstream all;
    all << environ.rdbuf();
    if (("\0" + all.str()).find(std::string("\0RANK=", 6) + std::to_string(rank) + '\0') != std::string::npos)
      found = pid;
  }
  if (proc) ::closedir(proc);
  return found;
}

struct Run {
  int exit_code = -1, restarts = 0;
  std::string output;
  std::string json;  // rank 0's last line
};

// dist_sgd on 2 ranks with checkpoints in dir; when kill_at_step > 0, rank 1 is killed as soon as
// rank 0 reports that step.
Run train(const std::string& dir, int kill_at_step, const std::vector<std::string>& extra = {}) {
  const std::string bin = TROUPE_BIN_DIR;
  LaunchOptions o;
  o.nproc = 2;
  o.grace = std::chrono::seconds(2);
  o.max_restarts = 2;
  o.command = {bin + "/dist_sgd", "--subset", "6400", "--epochs", "2", "--json", "--log-every", "1",
               "--checkpoint-dir", dir, "--checkpoint-every", "30", "--resume", "--deterministic"};
  o.command.insert(o.command.end(), extra.begin(), extra.end());
  Run run;
  std::mutex mutex;
  bool killed = false;
  o.on_line = [&](int rank, bool, const std::string& line) {
    std::lock_guard lock(mutex);
    run.output += "[rank " + std::to_string(rank) + "] " + line + "\n";
    if (rank == 0 && line.rfind("{", 0) == 0) run.json = line;
    if (!killed && kill_at_step > 0 && rank == 0 && line.rfind("step " + std::to_string(kill_at_step) + " ", 0) == 0) {
      const int pid = child_with_rank(1);
      if (pid > 0) ::kill(pid, SIGKILL);
      killed = true;
    }
  };
  const auto result = troupe::net::launch(o);
  run.exit_code = result.exit_code;
  run.restarts = result.restarts;
  return run;
}

std::string field(const std::string& json, const std::string& name) {
  std::smatch m;
  const std::regex pattern("\"" + name + "\":(-?[0-9.]+)");
  return std::regex_search(json, m, pattern) ? m[1].str() : "";
}

}  // namespace

TEST_CASE("dist_sgd: a killed rank restarts the job from its checkpoint, ending with the same weights",
          "[checkpoint][dist]") {
  const fs::path dir = fs::temp_directory_path() / ("troupe_restart_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);

  const Run reference = train((dir / "reference").string(), 0);
  INFO(reference.output);
  REQUIRE(reference.exit_code == 0);
  CHECK(reference.restarts == 0);
  CHECK(field(reference.json, "steps") == "100");  // 3200 images per rank, 64 a batch, 2 epochs
  CHECK(field(reference.json, "resumed_from") == "-1");

  const Run killed = train((dir / "killed").string(), 75);
  INFO(killed.output);
  REQUIRE(killed.exit_code == 0);
  CHECK(killed.restarts == 1);
  // Rank 1 died at step 75 or 76 (rank 0 may have logged 75 before rank 1 took it): the newest
  // checkpoint both hold is step 60, 15 steps lost of at most --checkpoint-every 30.
  CHECK(field(killed.json, "resumed_from") == "60");
  CHECK(killed.output.find("resumed from") != std::string::npos);
  CHECK(field(killed.json, "params_fnv1a") == field(reference.json, "params_fnv1a"));
  CHECK(field(killed.json, "test_accuracy") == field(reference.json, "test_accuracy"));

  // A checkpoint of another run is refused, not loaded.
  const Run other = train((dir / "killed").string(), 0, {"--model", "wide"});
  CHECK(other.exit_code == 1);
  CHECK(other.restarts == 2);  // a deterministic failure fails every attempt
  CHECK(other.output.find("was saved by the run") != std::string::npos);
  fs::remove_all(dir);
}
