#include "devices/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

namespace troupe {

namespace {

// The reference implementation refuses larger headers; it bounds what a corrupt length can cost.
constexpr uint64_t kMaxSafetensorsHeaderSize = 100u << 20;

[[noreturn]] void corrupt(const std::string& path, const std::string& why) {
  throw IOError("safetensors: " + path + ": " + why);
}

const char* file_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
    case DType::boolean: return "BOOL";
  }
  return "?";
}

DType dtype_from_file_name(const std::string& text, const std::string& path, const std::string& tensor) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::boolean})
    if (text == file_dtype_name(t)) return t;
  throw DTypeError("safetensors: " + path + ": tensor '" + tensor + "' has dtype " + text +
                   ", which Troupe does not support (F32 F64 F16 BF16 I32 I64 U8 BOOL)");
}

// A read-only view of the whole file, mapped privately: pages written through a tensor are
// copied by the kernel and never reach the file.
struct MappedFile {
  uint8_t* data = nullptr;
  size_t size = 0;
  ~MappedFile() {
    if (data) munmap(data, size);
  }
};

std::shared_ptr<MappedFile> map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IOError("safetensors: cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw IOError("safetensors: cannot stat " + path + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode) || st.st_size < 8) {
    ::close(fd);
    corrupt(path, "not a safetensors file (" + std::to_string(st.st_size) + " bytes, the header length alone needs 8)");
  }
  auto file = std::make_shared<MappedFile>();
  file->size = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, file->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) throw IOError("safetensors: cannot map " + path + ": " + std::strerror(err));
  file->data = static_cast<uint8_t*>(p);
  return file;
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;  // into the data buffer after the header
};

uint64_t unsigned_field(const nlohmann::json& v, const std::string& path, const std::string& what) {
  if (!v.is_number_unsigned()) corrupt(path, what + " must be a non-negative integer, got " + v.dump());
  return v.get<uint64_t>();
}

Entry parse_entry(const std::string& name, const nlohmann::json& info, uint64_t buffer_size, const std::string& path) {
  const std::string where = "tensor '" + name + "'";
  if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets"))
    corrupt(path, where + " needs dtype, shape and data_offsets, got " + info.dump());
  if (!info["dtype"].is_string()) corrupt(path, where + ": dtype must be a string");
  Entry e{name, dtype_from_file_name(info["dtype"].get<std::string>(), path, name), {}};
  if (!info["shape"].is_array()) corrupt(path, where + ": shape must be an array");
  uint64_t bytes = itemsize(e.dtype);
  for (const auto& d : info["shape"]) {
    const uint64_t n = unsigned_field(d, path, where + " shape");
    if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (n != 0 && bytes > std::numeric_limits<uint64_t>::max() / n))
      corrupt(path, where + ": shape " + info["shape"].dump() + " is too large");
    bytes *= n;
    e.shape.push_back(static_cast<int64_t>(n));
  }
  const auto& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) corrupt(path, where + ": data_offsets must be [begin, end]");
  e.begin = unsigned_field(offsets[0], path, where + " data_offsets");
  e.end = unsigned_field(offsets[1], path, where + " data_offsets");
  if (e.begin > e.end || e.end > buffer_size)
    corrupt(path, where + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                      "] lie outside the " + std::to_string(buffer_size) + "-byte data buffer");
  if (e.end - e.begin != bytes)
    corrupt(path, where + ": " + std::string(troupe::name(e.dtype)) + to_string(e.shape) + " needs " +
                      std::to_string(bytes) + " bytes, data_offsets span " + std::to_string(e.end - e.begin));
  return e;
}

// Like the reference implementation: tensors tile the data buffer exactly, no overlaps, no holes.
void check_layout(std::vector<Entry>& entries, uint64_t buffer_size, const std::string& path) {
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < covered)
      corrupt(path, "tensors '" + previous->name + "' and '" + e.name + "' overlap");
    if (e.begin > covered)
      corrupt(path, "a hole of " + std::to_string(e.begin - covered) + " bytes precedes tensor '" + e.name + "'");
    covered = e.end;
    previous = &e;
  }
  if (covered != buffer_size)
    corrupt(path, std::to_string(buffer_size - covered) + " bytes after the last tensor belong to none");
}

void check_bools(const uint8_t* data, size_t n, const std::string& path, const std::string& tensor) {
  for (size_t i = 0; i < n; ++i)
    if (data[i] > 1)
      corrupt(path, "tensor '" + tensor + "': bool element " + std::to_string(i) + " is " + std::to_string(data[i]) +
                        ", not 0 or 1");
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

std::map<std::string, Tensor> read_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  std::shared_ptr<MappedFile> file = map_file(path);
  uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i) header_size |= static_cast<uint64_t>(file->data[i]) << (8 * i);
  if (header_size > kMaxSafetensorsHeaderSize || header_size > file->size - 8)
    corrupt(path, "header length " + std::to_string(header_size) + " exceeds the file (" + std::to_string(file->size) +
                      " bytes)");
  const uint8_t* header_begin = file->data + 8;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_begin, header_begin + header_size);
  } catch (const nlohmann::json::exception& e) {
    corrupt(path, std::string("the header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) corrupt(path, "the header is not a JSON object");

  const uint64_t buffer_size = file->size - 8 - header_size;
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) corrupt(path, "__metadata__ must be an object of strings");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) corrupt(path, "__metadata__ value of '" + key + "' is not a string");
        if (metadata) (*metadata)[key] = value.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(name, info, buffer_size, path));
  }
  check_layout(entries, buffer_size, path);

  uint8_t* buffer = file->data + 8 + header_size;
  std::map<std::string, Tensor> tensors;
  for (const Entry& e : entries) {
    uint8_t* data = buffer + e.begin;
    const size_t bytes = e.end - e.begin;
    if (e.dtype == DType::boolean) check_bools(data, bytes, path, e.name);
    Tensor t;
    if (reinterpret_cast<uintptr_t>(data) % itemsize(e.dtype) == 0) {
      // Zero-copy: the storage holds the mapping, so it outlives the map returned here if need be.
      auto storage = std::make_shared<Storage>(data, bytes, Device::cpu(), [file](void*) {});
      t = Tensor(std::move(storage), e.dtype, e.shape, contiguous_strides(e.shape), 0);
    } else {
      // A writer that did not keep offsets aligned: copy rather than hand kernels misaligned data.
      t = Tensor::empty(e.shape, e.dtype);
      if (bytes) std::memcpy(t.mutable_raw_data(), data, bytes);
    }
    tensors.emplace(e.name, std::move(t));
  }
  return tensors;
}

void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Wider dtypes first, as the reference writer does: every offset stays aligned to its itemsize,
  // so reading the file back is zero-copy.
  std::vector<std::pair<std::string, Tensor>> ordered;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") throw ValueError("write_safetensors: the tensor name __metadata__ is reserved");
    if (!t.defined()) throw ValueError("write_safetensors: tensor '" + name + "' is undefined");
    ordered.emplace_back(name, host_contiguous(t));
  }
  std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
    return itemsize(a.second.dtype()) > itemsize(b.second.dtype());
  });

  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : ordered) {
    header[name] = {{"dtype", file_dtype_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data buffer starts 8-byte aligned

  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "wb"));
  if (!f) throw IOError("safetensors: cannot create " + path + ": " + std::strerror(errno));
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  bool ok = std::fwrite(length, 1, 8, f.get()) == 8 && std::fwrite(text.data(), 1, text.size(), f.get()) == text.size();
  for (const auto& [name, t] : ordered)
    ok = ok && std::fwrite(t.raw_data(), 1, t.nbytes(), f.get()) == t.nbytes();
  if (!ok || std::fclose(f.release()) != 0)
    throw IOError("safetensors: cannot write " + path + ": " + std::strerror(errno));
}

}  // namespace troupe
