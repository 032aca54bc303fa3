// The profiler's summary tables, like PyTorch's key_averages().table(): the host spans by name
// (calls, total and self time), and the ops' time on their lanes (device_table).
#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "actors/observe/device_spans.h"
#include "actors/observe/profiler.h"
#include "actors/observe/spans.h"

namespace troupe {

using namespace observe;

std::string Profiler::device_table(size_t max_rows) const {
  struct Row {
    std::string name;
    int64_t calls = 0, total = 0;
  };
  std::map<std::string, Row> rows;
  int64_t all = 0;
  {
    std::lock_guard lock(device_spans().mutex);
    for (DeviceSpan& span : device_spans().spans) {
      const auto [start, end] = host_interval(span);
      Row& r = rows[span.name];
      r.name = span.name;
      ++r.calls;
      r.total += end - start;
      all += end - start;
    }
  }
  std::vector<Row> sorted;
  for (auto& [name, r] : rows) sorted.push_back(r);
  std::sort(sorted.begin(), sorted.end(), [](const Row& a, const Row& b) { return a.total > b.total; });
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %8s %12s %12s %8s\n", "Name", "Calls", "Lane ms", "Avg us", "Share");
  os << line << std::string(72, '-') << "\n";
  for (size_t i = 0; i < sorted.size() && i < max_rows; ++i) {
    const Row& r = sorted[i];
    std::snprintf(line, sizeof line, "%-28.28s %8lld %12.3f %12.2f %7.1f%%\n", r.name.c_str(),
                  static_cast<long long>(r.calls), r.total / 1e6, r.total / 1e3 / r.calls,
                  all ? 100.0 * r.total / all : 0.0);
    os << line;
  }
  return os.str();
}

std::string Profiler::table(size_t max_rows) const {
  struct Row {
    std::string name;
    int64_t calls = 0, total = 0, self = 0;
  };
  std::vector<std::shared_ptr<ThreadLog>> keep;
  std::map<std::string, Row> rows;
  int64_t all_self = 0;
  for (auto& [log, events] : snapshot(keep))
    for (auto& e : events) {
      if (e.sync) continue;
      Row& r = rows[e.name];
      r.name = e.name;
      ++r.calls;
      r.total += e.end - e.start;
      r.self += e.end - e.start - e.child_ns;
      all_self += e.end - e.start - e.child_ns;
    }
  std::vector<Row> sorted;
  for (auto& [name, r] : rows) sorted.push_back(r);
  std::sort(sorted.begin(), sorted.end(), [](const Row& a, const Row& b) { return a.total > b.total; });
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %8s %12s %12s %12s %8s\n", "Name", "Calls", "Total ms", "Self ms",
                "Avg us", "Self %");
  os << line << std::string(85, '-') << "\n";
  for (size_t i = 0; i < sorted.size() && i < max_rows; ++i) {
    const Row& r = sorted[i];
    std::snprintf(line, sizeof line, "%-28.28s %8lld %12.3f %12.3f %12.2f %7.1f%%\n", r.name.c_str(),
                  static_cast<long long>(r.calls), r.total / 1e6, r.self / 1e6, r.total / 1e3 / r.calls,
                  all_self ? 100.0 * r.self / all_self : 0.0);
    os << line;
  }
  return os.str();
}

}  // namespace troupe
