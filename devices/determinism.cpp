#include "devices/determinism.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace troupe {

namespace {

std::atomic<bool>& flag() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("TROUPE_DETERMINISTIC");
    return env && std::strcmp(env, "1") == 0;
  }()};
  return on;
}

}  // namespace

bool deterministic_kernels() { return flag().load(std::memory_order_relaxed); }

void set_deterministic_kernels(bool on) { flag().store(on, std::memory_order_relaxed); }

}  // namespace troupe
