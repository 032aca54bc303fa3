#pragma once
// IDX files (the MNIST family's format), plain or gzip-compressed.
//
//   Tensor images = read_idx("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
//   // u8 [60000, 28, 28]; a labels file gives u8 [60000]
//
// Every field is validated before use (magic, element type, dims, length); a missing or corrupt
// file is an IOError naming the path. With `limit` > 0 only the first `limit` items along dim 0
// are read (the rest is neither decompressed nor checked): a subset costs its own size.
#include <cstdint>
#include <string>

#include "devices/tensor.h"

namespace troupe::models {

Tensor read_idx(const std::string& path, int64_t limit = 0);

}  // namespace troupe::models
