// A job's trace (TROUPE_TRACE=DIR): every rank records from the start and writes DIR/rank-N.json
// at exit, with its clock's offset to rank 0's for `troupe trace merge`.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <mutex>

#include "actors/observe/profiler.h"
#include "actors/observe/spans.h"

namespace troupe {

using namespace observe;

void Profiler::set_job_clock(int rank, int64_t offset_ns, int64_t error_ns) {
  std::lock_guard lock(logs().mutex);
  logs().rank = rank;
  logs().clock_offset_ns = offset_ns;
  logs().clock_error_ns = error_ns;
}

void Profiler::start_job_trace_from_env() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* dir = std::getenv("TROUPE_TRACE");
    if (!dir || !*dir) return;
    global().start();
    std::atexit([] {
      const char* dir = std::getenv("TROUPE_TRACE");
      int rank = logs().rank;
      if (rank < 0)
        for (const char* name : {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
          if (const char* v = std::getenv(name); v && *v && rank < 0) rank = std::atoi(v);
      const std::string path = std::string(dir) + "/rank-" + std::to_string(std::max(rank, 0)) + ".json";
      try {
        std::filesystem::create_directories(dir);
        global().stop();
        global().export_chrome_trace(path);
      } catch (const std::exception& e) {
        std::cerr << "troupe: TROUPE_TRACE: " << e.what() << "\n";
      }
    });
  });
}

}  // namespace troupe
