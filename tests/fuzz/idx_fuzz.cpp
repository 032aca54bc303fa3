// libFuzzer target for the IDX reader (models/data/idx.h), plain and gzip-compressed (first byte
// odd: the rest is written as a .gz file): a tensor of the dims the header gives, or troupe::Error.
//   build/bin/idx_fuzz -max_total_time=60 tests/fuzz/corpus/idx
#include <cstdint>
#include <cstdlib>

#include "devices/error.h"
#include "models/data/idx.h"
#include "tests/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool gz = data[0] & 1;
  const std::string path = fuzz_file(data + 1, size - 1, gz ? ".idx.gz" : ".idx");
  try {
    const troupe::Tensor t = troupe::models::read_idx(path);
    if (!gz && t.nbytes() > size) std::abort();
  } catch (const troupe::Error&) {
  }
  return 0;
}
