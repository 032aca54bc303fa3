#pragma once
// For fuzz targets whose parser reads a path: the input written to a file of this process's own
// under /dev/shm (memory, not disk), replaced on every input.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

inline std::string fuzz_file(const uint8_t* data, size_t size, const std::string& suffix) {
  const std::string path = "/dev/shm/troupe-fuzz-" + std::to_string(::getpid()) + suffix;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}
