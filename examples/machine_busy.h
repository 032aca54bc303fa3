#pragma once
// CPU time the whole machine spent busy (every process, the kernel's network work included): what
// a call to many ranks that share a few cores costs in all, against its wall time. Network
// namespaces share /proc/stat, so the ranks of a netns test cluster count too.
//
//   const double before = machine_busy_seconds();
//   for (int i = 0; i < n; ++i) call();
//   line["cpu_us_per_call"] = (machine_busy_seconds() - before) / n * 1e6;
//
// The kernel counts in clock ticks (10 ms at USER_HZ 100): time a stretch of 100 ticks or more.
#include <unistd.h>

#include <fstream>
#include <string>

namespace troupe {

// Busy CPU seconds since boot, summed over the CPUs (user, system and interrupts: not idle, iowait,
// or steal, which other guests of the host used); 0 without /proc.
inline double machine_busy_seconds() {
  std::ifstream stat("/proc/stat");
  std::string cpu;
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) || cpu != "cpu") return 0;
  return static_cast<double>(user + nice + system + irq + softirq) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The machine's CPUs online, which that busy time is spread over.
inline int machine_cpus() { return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)); }

}  // namespace troupe
