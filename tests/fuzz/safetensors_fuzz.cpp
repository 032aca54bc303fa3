// libFuzzer target for the safetensors reader (devices/io/safetensors.h): any file reads to
// tensors lying inside it, which write_safetensors writes back readable, or throws troupe::Error;
// never crash, hang or map past the file.
//   build/bin/safetensors_fuzz -max_total_time=60 tests/fuzz/corpus/safetensors
#include <cstdint>
#include <cstdlib>

#include "devices/error.h"
#include "devices/io/safetensors.h"
#include "tests/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz_file(data, size, ".safetensors");
  try {
    std::map<std::string, std::string> metadata;
    const auto tensors = troupe::read_safetensors(path, &metadata);
    size_t bytes = 0;
    for (const auto& [name, t] : tensors) bytes += t.nbytes();
    if (bytes > size) std::abort();
    troupe::write_safetensors(path + ".again", tensors, metadata);
    if (troupe::read_safetensors(path + ".again").size() != tensors.size()) std::abort();
  } catch (const troupe::Error&) {
  }
  return 0;
}
