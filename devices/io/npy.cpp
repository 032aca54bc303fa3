#include "devices/io/npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>

namespace troupe {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
constexpr size_t kPreludeV1 = kMagicSize + 2 + 2;  // magic, version, u16 header length
constexpr size_t kPreludeV2 = kMagicSize + 2 + 4;  // magic, version, u32 header length
// NumPy itself refuses headers beyond this; it also bounds what a corrupt length can make us read.
constexpr size_t kMaxNpyHeaderSize = 1 << 20;

struct NpyHeader {
  DType dtype = DType::f32;
  Shape shape;
  bool fortran_order = false;
  size_t data_offset = 0;  // bytes from the start of the file
  size_t data_bytes = 0;
};

[[noreturn]] void corrupt(std::string_view name, const std::string& why) {
  throw IOError("npy: " + std::string(name) + ": " + why);
}

// The header dictionary is a Python literal, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
// This reads exactly that grammar: string keys; string, True/False or tuple-of-int values.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::string_view name) : text_(text), name_(name) {}

  void parse(std::optional<std::string>& descr, std::optional<bool>& fortran, std::optional<Shape>& shape) {
    expect('{');
    while (!peek('}')) {
      const std::string key = string_literal();
      expect(':');
      if (key == "descr" && !descr) {
        if (peek('['))
          throw DTypeError("npy: " + std::string(name_) + ": structured dtypes are not supported");
        descr = string_literal();
      } else if (key == "fortran_order" && !fortran) {
        fortran = boolean();
      } else if (key == "shape" && !shape) {
        shape = tuple();
      } else {
        fail<int>("unexpected or repeated key '" + key + "' in the header");
      }
      if (!peek('}')) expect(',');
    }
    expect('}');
    skip_space();
    if (pos_ != text_.size()) fail<int>("trailing characters after the header dictionary");
  }

 private:
  template <class T>
  [[noreturn]] T fail(const std::string& why) {
    corrupt(name_, why + " (header: " + std::string(text_.substr(0, 200)) + ")");
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t')) ++pos_;
  }
  bool peek(char c) {
    skip_space();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail<int>(std::string("malformed header: expected '") + c + "' at " + std::to_string(pos_));
    ++pos_;
  }
  std::string string_literal() {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"'))
      fail<int>("malformed header: expected a string at " + std::to_string(pos_));
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) fail<int>("malformed header: unterminated string");
    std::string s(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }
  bool boolean() {
    skip_space();
    for (auto [word, value] : {std::pair{"True", true}, std::pair{"False", false}})
      if (text_.substr(pos_, std::strlen(word)) == word) {
        pos_ += std::strlen(word);
        return value;
      }
    return fail<bool>("malformed header: fortran_order is neither True nor False");
  }
  int64_t integer() {
    skip_space();
    int64_t v = 0;
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) fail<int>("shape dimension too large");
      v = v * 10 + (text_[pos_++] - '0');
    }
    if (pos_ == start) fail<int>("malformed header: expected a non-negative integer at " + std::to_string(start));
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2 wrote longs as 3L
    return v;
  }
  Shape tuple() {
    Shape shape;
    expect('(');
    while (!peek(')')) {
      shape.push_back(integer());
      if (!peek(')')) expect(',');
    }
    expect(')');
    return shape;
  }

  std::string_view text_;
  std::string_view name_;
  size_t pos_ = 0;
};

DType dtype_from_descr(const std::string& descr, std::string_view name) {
  auto unsupported = [&](const std::string& why) -> DType {
    throw DTypeError("npy: " + std::string(name) + ": dtype '" + descr + "' is not supported (" + why +
                     "; Troupe reads f2 f4 f8 i4 i8 u1 b1, little endian)");
  };
  if (descr.size() < 3) return unsupported("unknown dtype");
  const char order = descr[0];
  const std::string kind = descr.substr(1);
  const bool single_byte = kind == "u1" || kind == "b1";
  if (order == '>' && !single_byte) return unsupported("big endian");
  if (order != '<' && order != '|' && order != '=' && !(order == '>' && single_byte))
    return unsupported("unknown byte order");
  if (kind == "f4") return DType::f32;
  if (kind == "f8") return DType::f64;
  if (kind == "f2") return DType::f16;
  if (kind == "i4") return DType::i32;
  if (kind == "i8") return DType::i64;
  if (kind == "u1") return DType::u8;
  if (kind == "b1") return DType::boolean;
  if (kind[0] == 'O') return unsupported("object arrays cannot be read without Python");
  return unsupported("no Troupe dtype matches");
}

const char* descr_of(DType t) {
  switch (t) {
    case DType::f32: return "<f4";
    case DType::f64: return "<f8";
    case DType::f16: return "<f2";
    case DType::i32: return "<i4";
    case DType::i64: return "<i8";
    case DType::u8: return "|u1";
    case DType::boolean: return "|b1";
    case DType::bf16: break;
  }
  throw DTypeError("npy: bf16 has no NumPy dtype; convert with .to(DType::f32) or save as safetensors");
}

uint32_t read_le(const uint8_t* p, size_t bytes) {
  uint32_t v = 0;
  for (size_t i = 0; i < bytes; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

// Validates everything up to the data. `prefix` holds at least the prelude and, when it says so,
// the whole header; `file_size` is the size of the complete file. Throws when the prefix is short.
NpyHeader parse_header(std::span<const uint8_t> prefix, size_t file_size, std::string_view name) {
  if (prefix.size() < kPreludeV1 || std::memcmp(prefix.data(), kMagic, kMagicSize) != 0)
    corrupt(name, "not an npy file (the magic string \\x93NUMPY is missing)");
  const int major = prefix[6], minor = prefix[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    corrupt(name, "unsupported npy version " + std::to_string(major) + "." + std::to_string(minor));
  const size_t prelude = major == 1 ? kPreludeV1 : kPreludeV2;
  if (prefix.size() < prelude) corrupt(name, "truncated header");
  const size_t header_len = read_le(prefix.data() + 8, major == 1 ? 2 : 4);
  if (header_len > kMaxNpyHeaderSize) corrupt(name, "header length " + std::to_string(header_len) + " is implausible");
  if (prelude + header_len > file_size || prelude + header_len > prefix.size())
    corrupt(name, "truncated header (" + std::to_string(header_len) + " header bytes announced, file has " +
                      std::to_string(file_size) + " bytes)");
  const std::string_view text(reinterpret_cast<const char*>(prefix.data() + prelude), header_len);

  std::optional<std::string> descr;
  std::optional<bool> fortran;
  std::optional<Shape> shape;
  HeaderParser(text, name).parse(descr, fortran, shape);
  if (!descr || !fortran || !shape) corrupt(name, "the header lacks descr, fortran_order or shape");

  NpyHeader h;
  h.dtype = dtype_from_descr(*descr, name);
  h.shape = *shape;
  h.fortran_order = *fortran;
  h.data_offset = prelude + header_len;
  // numel * itemsize without overflow: a corrupt shape must not wrap around to a small size.
  size_t bytes = itemsize(h.dtype);
  for (int64_t d : h.shape) {
    if (d != 0 && bytes > std::numeric_limits<size_t>::max() / static_cast<size_t>(d))
      corrupt(name, "shape " + to_string(h.shape) + " is too large");
    bytes *= static_cast<size_t>(d);
  }
  h.data_bytes = bytes;
  if (file_size - h.data_offset != h.data_bytes)
    corrupt(name, "shape " + std::string(troupe::name(h.dtype)) + to_string(h.shape) + " needs " +
                      std::to_string(h.data_bytes) + " data bytes, the file has " +
                      std::to_string(file_size - h.data_offset));
  return h;
}

// Bytes that are neither 0 nor 1 would be undefined behaviour as C++ bool: refuse them.
void check_bools(const uint8_t* data, size_t n, std::string_view name) {
  for (size_t i = 0; i < n; ++i)
    if (data[i] > 1)
      corrupt(name, "bool element " + std::to_string(i) + " is " + std::to_string(data[i]) + ", not 0 or 1");
}

// Fortran order stores the reversed shape in C order: read that, then reverse the dims (a view).
Tensor arrange(Tensor stored, const NpyHeader& h) {
  if (!h.fortran_order || h.shape.size() < 2) return stored;
  std::vector<int64_t> reversed(h.shape.size());
  for (size_t i = 0; i < reversed.size(); ++i) reversed[i] = static_cast<int64_t>(reversed.size() - 1 - i);
  return stored.permute(reversed);
}

Shape stored_shape(const NpyHeader& h) {
  if (!h.fortran_order) return h.shape;
  return Shape(h.shape.rbegin(), h.shape.rend());
}

std::string header_of(const Tensor& t) {
  std::string shape = "(";
  for (size_t i = 0; i < t.shape().size(); ++i) shape += (i ? ", " : "") + std::to_string(t.shape()[i]);
  shape += t.shape().size() == 1 ? ",)" : ")";
  std::string dict =
      std::string("{'descr': '") + descr_of(t.dtype()) + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad with spaces so that the data starts 64-byte aligned, ending in a newline as NumPy does.
  auto padded_total = [&](size_t prelude) { return (prelude + dict.size() + 1 + 63) / 64 * 64; };
  const size_t prelude = padded_total(kPreludeV1) - kPreludeV1 <= 0xffff ? kPreludeV1 : kPreludeV2;
  const size_t total = padded_total(prelude);
  dict.append(total - prelude - dict.size() - 1, ' ');
  dict += '\n';
  std::string out(kMagic, kMagicSize);
  out += static_cast<char>(prelude == kPreludeV1 ? 1 : 2);
  out += '\0';
  const size_t len = dict.size();
  for (size_t i = 0; i < prelude - kMagicSize - 2; ++i) out += static_cast<char>((len >> (8 * i)) & 0xff);
  return out + dict;
}

Tensor host_tensor(const Tensor& t, const char* what) {
  if (!t.defined()) throw ValueError(std::string(what) + ": the tensor is undefined");
  descr_of(t.dtype());  // refuses bf16 before any copy
  return t.device().is_cpu() ? t : t.to(Device::cpu());
}

struct NpyFileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, NpyFileCloser>;

}  // namespace

Tensor parse_npy(std::span<const uint8_t> bytes, std::string_view name) {
  const NpyHeader h = parse_header(bytes, bytes.size(), name);
  Tensor stored = Tensor::empty(stored_shape(h), h.dtype);
  if (h.data_bytes) std::memcpy(stored.mutable_raw_data(), bytes.data() + h.data_offset, h.data_bytes);
  if (h.dtype == DType::boolean) check_bools(bytes.data() + h.data_offset, h.data_bytes, name);
  return arrange(std::move(stored), h);
}

Tensor read_npy(const std::string& path) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) throw IOError("npy: cannot open " + path + ": " + std::strerror(errno));
  if (std::fseek(f.get(), 0, SEEK_END) != 0) throw IOError("npy: cannot seek in " + path);
  const long size = std::ftell(f.get());
  if (size < 0) throw IOError("npy: cannot tell the size of " + path);
  std::rewind(f.get());
  // Read the prelude, then exactly the header it announces (bounded), before allocating for data.
  std::vector<uint8_t> prefix(std::min<size_t>(static_cast<size_t>(size), kPreludeV2));
  if (std::fread(prefix.data(), 1, prefix.size(), f.get()) != prefix.size()) throw IOError("npy: cannot read " + path);
  if (prefix.size() >= kPreludeV1 && std::memcmp(prefix.data(), kMagic, kMagicSize) == 0) {
    const size_t header_len = read_le(prefix.data() + 8, prefix[6] == 1 ? 2 : 4);
    const size_t prelude = prefix[6] == 1 ? kPreludeV1 : kPreludeV2;
    const size_t want = std::min({prelude + header_len, static_cast<size_t>(size), prelude + kMaxNpyHeaderSize});
    if (want > prefix.size()) {
      const size_t have = prefix.size();
      prefix.resize(want);
      if (std::fread(prefix.data() + have, 1, want - have, f.get()) != want - have)
        throw IOError("npy: cannot read " + path);
    }
  }
  const NpyHeader h = parse_header(prefix, static_cast<size_t>(size), path);
  Tensor stored = Tensor::empty(stored_shape(h), h.dtype);
  void* data = stored.mutable_raw_data();
  if (std::fseek(f.get(), static_cast<long>(h.data_offset), SEEK_SET) != 0 ||
      std::fread(data, 1, h.data_bytes, f.get()) != h.data_bytes)
    throw IOError("npy: " + path + ": truncated data");
  if (h.dtype == DType::boolean) check_bools(static_cast<const uint8_t*>(data), h.data_bytes, path);
  return arrange(std::move(stored), h);
}

std::vector<uint8_t> to_npy(const Tensor& tensor) {
  const Tensor host = host_tensor(tensor, "to_npy");
  const std::string header = header_of(host);
  std::vector<uint8_t> out(header.size() + host.nbytes());
  std::memcpy(out.data(), header.data(), header.size());
  if (host.numel()) copy_elements(host, host.dtype(), out.data() + header.size());
  return out;
}

void write_npy(const std::string& path, const Tensor& tensor) {
  const Tensor host = host_tensor(tensor, "write_npy").contiguous();
  const std::string header = header_of(host);
  File f(std::fopen(path.c_str(), "wb"));
  if (!f) throw IOError("npy: cannot create " + path + ": " + std::strerror(errno));
  const bool ok = std::fwrite(header.data(), 1, header.size(), f.get()) == header.size() &&
                  std::fwrite(host.raw_data(), 1, host.nbytes(), f.get()) == host.nbytes();
  if (!ok || std::fclose(f.release()) != 0) throw IOError("npy: cannot write " + path + ": " + std::strerror(errno));
}

}  // namespace troupe
