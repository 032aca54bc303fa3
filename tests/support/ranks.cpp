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

// The lines of a failing rank that say why, first: a CI log often keeps only the start of a
// failure's message, and Catch's banners would fill it.
std::string RankRun::digest() const {
  static const char* const kNoise[] = {"Filters:", "~~~~", "----", "....", "====", "Run with -?",
                                       "is a Catch v", "test cases:"};
  std::string kept;
  size_t begin = 0;
  while (begin < output.size()) {
    size_t end = output.find('\n', begin);
    if (end == std::string::npos) end = output.size();
    const std::string line = output.substr(begin, end - begin);
    const size_t text = line.find("] ");
    const bool blank = text == std::string::npos || line.find_first_not_of(' ', text + 2) == std::string::npos;
    bool noise = blank;
    for (const char* n : kNoise) noise = noise || line.find(n) != std::string::npos;
    if (!noise) kept += line + "\n";
    begin = end + 1;
  }
  return kept;
}

void check_all_passed(const RankRun& run, int ranks) {
  INFO(run.digest());
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
  return launch_collecting(std::move(options));
}

RankRun launch_collecting(troupe::net::LaunchOptions options) {
  RankRun run;
  std::mutex mutex;
  options.on_line = [&, also = std::move(options.on_line)](int rank, bool err, const std::string& line) {
    {
      std::lock_guard lock(mutex);
      run.output += "[rank " + std::to_string(rank) + "] " + line + "\n";
    }
    if (also) also(rank, err, line);
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
