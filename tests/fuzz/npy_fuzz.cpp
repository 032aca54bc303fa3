// libFuzzer target for the .npy parser (devices/io/npy.h): any bytes parse to a tensor whose
// to_npy bytes parse back to the same tensor, or throw troupe::Error (IOError, DTypeError...);
// never crash, hang or allocate more than the input describes.
//   build/bin/npy_fuzz -max_total_time=60 tests/fuzz/corpus/npy
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "devices/error.h"
#include "devices/io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const troupe::Tensor t = troupe::parse_npy({data, size}, "fuzz");
    if (t.nbytes() > size) std::abort();  // the data must be in the input
    const std::vector<uint8_t> again = troupe::to_npy(t);
    const troupe::Tensor back = troupe::parse_npy(again, "fuzz round trip");
    const troupe::Tensor a = t.contiguous(), b = back.contiguous();
    if (a.meta().str() != b.meta().str() || std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) != 0) std::abort();
  } catch (const troupe::Error&) {
  }
  return 0;
}
