#pragma once
// Page faults a benchmark's steady state takes: a second forward of a model should fault no fresh
// pages (its temporaries come back from the host allocator's caches), and a figure says so.
//
//   const long before = minor_page_faults();
//   model(x);
//   line["page_faults_per_forward"] = minor_page_faults() - before;
#include <sys/resource.h>

namespace troupe {

// Minor faults of the whole process so far (every thread's): pages touched for the first time.
inline long minor_page_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

}  // namespace troupe
