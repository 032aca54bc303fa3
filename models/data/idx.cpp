#include "models/data/idx.h"

#include <zlib.h>

#include <cstring>
#include <vector>

#include "devices/error.h"

namespace troupe::models {

namespace {

// gzread reads plain files unchanged too, so one path serves .gz and uncompressed copies.
class GzFile {
 public:
  explicit GzFile(const std::string& path) : path_(path), file_(gzopen(path.c_str(), "rb")) {
    if (!file_) throw IOError("read_idx: cannot open '" + path + "': " + std::strerror(errno));
  }
  ~GzFile() { gzclose(file_); }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // Reads exactly n bytes or throws naming what was being read.
  void read(void* dst, size_t n, const char* what) {
    auto* out = static_cast<unsigned char*>(dst);
    while (n > 0) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n, 1u << 30));
      const int got = gzread(file_, out, chunk);
      if (got <= 0) {
        int code = 0;
        const char* message = gzerror(file_, &code);
        throw IOError("read_idx: '" + path_ + "' ends early or is corrupt while reading the " + what +
                      (code != Z_OK && code != Z_STREAM_END ? std::string(" (") + message + ")" : ""));
      }
      out += got;
      n -= static_cast<size_t>(got);
    }
  }
  bool at_end() {
    unsigned char extra;
    return gzread(file_, &extra, 1) == 0;
  }

 private:
  std::string path_;
  gzFile file_;
};

uint32_t big_endian(const unsigned char* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

}  // namespace

Tensor read_idx(const std::string& path, int64_t limit) {
  GzFile file(path);
  unsigned char magic[4];
  file.read(magic, 4, "magic number");
  if (magic[0] != 0 || magic[1] != 0)
    throw IOError("read_idx: '" + path + "' is not an IDX file (bad magic number)");
  if (magic[2] != 0x08)
    throw IOError("read_idx: '" + path + "' holds element type 0x" + std::to_string(magic[2]) +
                  "; only unsigned bytes (0x08) are supported");
  const int rank = magic[3];
  if (rank < 1 || rank > 4) throw IOError("read_idx: '" + path + "' has " + std::to_string(rank) + " dims (1..4)");
  Shape shape;
  int64_t count = 1;
  for (int d = 0; d < rank; ++d) {
    unsigned char b[4];
    file.read(b, 4, "dimensions");
    const int64_t n = big_endian(b);
    if (n == 0 || count > (int64_t{1} << 34) / n)
      throw IOError("read_idx: '" + path + "' declares an implausible dimension " + std::to_string(n));
    shape.push_back(n);
    count *= n;
  }
  const bool partial = limit > 0 && limit < shape[0];
  if (partial) {
    count = count / shape[0] * limit;
    shape[0] = limit;
  }
  Tensor out = Tensor::empty(shape, DType::u8);
  file.read(out.mutable_data<uint8_t>(), static_cast<size_t>(count), "data");
  if (!partial && !file.at_end()) throw IOError("read_idx: '" + path + "' has bytes after the declared data");
  return out;
}

}  // namespace troupe::models
