#include "support/ranks.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <mutex>

using namespace std::chrono_literals;

int RankRun::count(const std::string& part) const {
  int n = 0;
  for (size_t at = output.find(part); at != std::string::npos; at = output.find(part, at + 1)) ++n;
  return n;
}

void check_all_passed(const RankRun& run, int ranks) {
  INFO(run.output);
  CHECK(run.result.exit_code == 0);
  CHECK(run.passed_ranks() == ranks);
}

std::vector<std::string> rank_command(const std::string& rank_test) {
  return {std::filesystem::read_symlink("/proc/self/exe").string(), rank_test};
}

RankRun run_ranks(int nproc, const std::string& rank_test, troupe::net::LaunchOptions options) {
  options.nproc = nproc;
  for (std::string& part : rank_command(rank_test)) options.command.push_back(std::move(part));
  if (options.grace == troupe::net::LaunchOptions{}.grace) options.grace = 2s;
  RankRun run;
  std::mutex mutex;
  options.on_line = [&](int rank, bool, const std::string& line) {
    std::lock_guard lock(mutex);
    run.output += "[rank " + std::to_string(rank) + "] " + line + "\n";
  };
  const auto start = std::chrono::steady_clock::now();
  run.result = troupe::net::launch(options);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

std::shared_ptr<troupe::net::ProcessGroup> world_of_one() {
  troupe::net::InitOptions o;
  o.init_method = "tcp://127.0.0.1:" + std::to_string(troupe::net::free_tcp_port());
  o.rank = 0;
  o.world_size = 1;
  o.timeout = 5s;
  return troupe::net::init_process_group(o);
}
