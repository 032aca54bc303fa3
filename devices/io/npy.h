#pragma once
// NumPy .npy files (format versions 1.0, 2.0 and 3.0), little endian, every Troupe dtype but bf16
// (NumPy has no bfloat16: convert to f32 or use safetensors).
//
//   Tensor x = read_npy("x.npy");                 // C or Fortran order (the latter as a transposed view)
//   write_npy("y.npy", relu(x));                  // always C order, v1.0 unless the header is huge
//   std::vector<uint8_t> bytes = to_npy(x);       // the same bytes in memory
//   Tensor back = parse_npy(bytes, "message");   // errors name "message"
//
// The header is validated completely (magic, version, length, keys, dtype, shape against the data
// size) before anything is allocated: a truncated or corrupt file is an IOError naming the path,
// an unsupported dtype (big endian, objects, strings, complex) a DTypeError naming it.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "devices/tensor.h"

namespace troupe {

Tensor read_npy(const std::string& path);
void write_npy(const std::string& path, const Tensor& tensor);

Tensor parse_npy(std::span<const uint8_t> bytes, std::string_view name_for_errors);
std::vector<uint8_t> to_npy(const Tensor& tensor);

}  // namespace troupe
