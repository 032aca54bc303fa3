#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "devices/io/npy.h"
#include "devices/io/safetensors.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

const std::string kIo = std::string(TROUPE_FIXTURES) + "/io/";

// A fresh directory per test case, removed at the end.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() / ("troupe_io_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// An npy file with the given header dictionary (padded like NumPy's) and data bytes.
std::vector<uint8_t> npy_bytes(const std::string& dict, size_t data_bytes, uint8_t major = 1) {
  const size_t prelude = major == 1 ? 10 : 12;
  std::string header = dict;
  header.append((64 - (prelude + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  // Sized once and written in place: growing it by push_back made GCC 12 warn of an overflow
  // that cannot happen (-Wstringop-overflow, at -march=x86-64-v3).
  std::vector<uint8_t> out(prelude + header.size() + data_bytes, 0);
  const uint8_t magic[] = {0x93, 'N', 'U', 'M', 'P', 'Y', major, 0};
  std::copy(std::begin(magic), std::end(magic), out.begin());
  for (size_t i = 0; i < prelude - 8; ++i) out[8 + i] = static_cast<uint8_t>(header.size() >> (8 * i));
  std::copy(header.begin(), header.end(), out.begin() + static_cast<std::ptrdiff_t>(prelude));
  return out;
}

// A safetensors file from a header text and a data buffer.
std::vector<uint8_t> safetensors_bytes(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(8 + header.size() + data.size());
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  std::copy(header.begin(), header.end(), out.begin() + 8);
  std::copy(data.begin(), data.end(), out.begin() + 8 + static_cast<std::ptrdiff_t>(header.size()));
  return out;
}

Tensor sample(DType dtype, const Shape& shape) {
  return Tensor::arange(numel(shape), DType::f64).reshape(shape).to(dtype);
}

}  // namespace

TEST_CASE("npy round-trips every NumPy dtype, shape and view", "[io][npy]") {
  TempDir dir;
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::i32, DType::i64, DType::u8, DType::boolean}) {
    for (const Shape& shape : {Shape{}, Shape{5}, Shape{2, 3, 4}, Shape{0, 3}}) {
      INFO(name(dtype) << to_string(shape));
      const Tensor x = sample(dtype, shape);
      const Tensor from_memory = parse_npy(to_npy(x), "memory");
      CHECK(from_memory.meta() == x.meta());
      CHECK(from_memory.to_vector<double>() == x.to_vector<double>());
      write_npy(dir.file("x.npy"), x);
      const Tensor from_file = read_npy(dir.file("x.npy"));
      CHECK(from_file.meta() == x.meta());
      CHECK(from_file.to_vector<double>() == x.to_vector<double>());
      CHECK(read_bytes(dir.file("x.npy")) == to_npy(x));
    }
  }
  // A transposed view is written in C order of its logical shape.
  const Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1);
  const Tensor back = parse_npy(to_npy(t), "memory");
  CHECK(back.shape() == Shape{3, 2});
  CHECK(back.to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
  // NumPy's header layout: magic, v1.0, the dictionary, data 64-byte aligned.
  const auto bytes = to_npy(Tensor::zeros({2, 3}));
  const std::string header(bytes.begin() + 10, bytes.begin() + 10 + (bytes[8] | bytes[9] << 8));
  CHECK(bytes[6] == 1);
  CHECK((10 + header.size()) % 64 == 0);
  CHECK(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 0) == 0);
  CHECK(header.back() == '\n');
}

TEST_CASE("npy reads the files NumPy writes", "[io][npy]") {
  for (const char* dt : {"f4", "f8", "f2", "i4", "i8", "u1"}) {
    INFO(dt);
    const Tensor x = read_npy(kIo + "six_" + dt + ".npy");
    CHECK(x.shape() == Shape{2, 3});
    CHECK(x.to_vector<double>() == std::vector<double>{0, 1, 2, 3, 4, 5});
  }
  CHECK(read_npy(kIo + "six_f2.npy").dtype() == DType::f16);
  CHECK(read_npy(kIo + "six_u1.npy").dtype() == DType::u8);
  const Tensor flags = read_npy(kIo + "six_b1.npy");
  CHECK(flags.dtype() == DType::boolean);
  CHECK(flags.to_vector<bool>() == std::vector<bool>{false, true, false, true, false, true});
  // Fortran order comes back as a transposed view with the right logical values.
  const Tensor f = read_npy(kIo + "fortran.npy");
  CHECK(f.shape() == Shape{2, 3, 4});
  CHECK_FALSE(f.is_contiguous());
  CHECK(f.to_vector<float>() == Tensor::arange(24).to_vector<float>());
  CHECK(f.select(1, 2).to_vector<float>() == std::vector<float>{8, 9, 10, 11, 20, 21, 22, 23});
  for (const char* v : {"version2.npy", "version3.npy"}) {
    INFO(v);
    const Tensor x = read_npy(kIo + v);
    CHECK(x.dtype() == DType::i64);
    CHECK(x.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
  }
}

TEST_CASE("npy refuses what it cannot represent, naming the file", "[io][npy][errors]") {
  CHECK_THROWS_AS(read_npy(kIo + "big_endian.npy"), DTypeError);
  CHECK_THROWS_WITH(read_npy(kIo + "big_endian.npy"), Catch::Contains("big_endian.npy") && Catch::Contains(">f4"));
  CHECK_THROWS_AS(read_npy(kIo + "object.npy"), DTypeError);
  CHECK_THROWS_WITH(read_npy(kIo + "object.npy"), Catch::Contains("object.npy") && Catch::Contains("object"));
  const Tensor b = Tensor::zeros({2}, DType::bf16);
  CHECK_THROWS_AS(to_npy(b), DTypeError);
  CHECK_THROWS_WITH(to_npy(b), Catch::Contains("bf16") && Catch::Contains("f32") && Catch::Contains("safetensors"));
  TempDir dir;
  CHECK_THROWS_AS(write_npy(dir.file("b.npy"), b), DTypeError);
  CHECK_FALSE(fs::exists(dir.file("b.npy")));
  CHECK_THROWS_AS(to_npy(Tensor()), ValueError);
  CHECK_THROWS_AS(parse_npy(npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", 8), "c.npy"),
                  DTypeError);
  CHECK_THROWS_AS(parse_npy(npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", 4), "s"),
                  DTypeError);
}

TEST_CASE("npy validates the header and size before allocating", "[io][npy][errors]") {
  auto dict = [](const std::string& descr, const std::string& fortran, const std::string& shape) {
    return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
  };
  const std::string ok_dict = dict("<f4", "False", "(2, 3)");
  const std::vector<uint8_t> ok_v1 = npy_bytes(ok_dict, 24), ok_v2 = npy_bytes(ok_dict, 24, 2);
  REQUIRE(parse_npy(ok_v1, "ok").shape() == Shape{2, 3});
  REQUIRE(parse_npy(ok_v2, "ok").shape() == Shape{2, 3});
  // Every truncation of a valid file is an IOError, never a crash.
  const std::vector<uint8_t> full = to_npy(sample(DType::f32, {2, 3}));
  for (size_t n = 0; n < full.size(); ++n) {
    INFO("prefix of " << n << " bytes");
    CHECK_THROWS_AS(parse_npy(std::span(full.data(), n), "cut.npy"), IOError);
  }
  auto patched = [](std::vector<uint8_t> bytes, size_t at, uint8_t value) {
    bytes[at] = value;
    return bytes;
  };
  const std::vector<uint8_t> huge_shape = npy_bytes(dict("<f8", "False", "(4000000000, 4000000000, 4000000000)"), 8);
  const std::vector<uint8_t> bools = npy_bytes(dict("|b1", "False", "(2,)"), 2);
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> broken = {
      {"magic", patched(ok_v1, 1, 'X')},
      {"version", patched(ok_v1, 6, 9)},
      {"header length", patched(patched(ok_v1, 8, 0xff), 9, 0xff)},
      {"huge v2 header length", patched(ok_v2, 11, 0x7f)},
      {"missing key", npy_bytes("{'descr': '<f4', 'shape': (2, 3), }", 24)},
      {"extra key", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1, }", 24)},
      {"repeated key", npy_bytes("{'descr': '<f4', " + ok_dict.substr(1), 24)},
      {"bad bool", npy_bytes(dict("<f4", "Maybe", "(2, 3)"), 24)},
      {"negative dim", npy_bytes(dict("<f4", "False", "(-2, 3)"), 24)},
      {"not a dict", npy_bytes("[1, 2]", 24)},
      {"unterminated", npy_bytes("{'descr': '<f4", 24)},
      {"short data", npy_bytes(ok_dict, 20)},
      {"extra data", npy_bytes(ok_dict, 28)},
      {"huge shape", huge_shape},
      {"bool byte", patched(bools, bools.size() - 1, 7)},
  };
  for (const auto& [what, bytes] : broken) {
    INFO(what);
    CHECK_THROWS_AS(parse_npy(bytes, "broken.npy"), IOError);
    CHECK_THROWS_WITH(parse_npy(bytes, "broken.npy"), Catch::Contains("broken.npy"));
  }
  // The same checks guard files, which are never read past their header before validation.
  TempDir dir;
  write_bytes(dir.file("huge.npy"), huge_shape);
  CHECK_THROWS_AS(read_npy(dir.file("huge.npy")), IOError);
  write_bytes(dir.file("cut.npy"), std::vector<uint8_t>(full.begin(), full.end() - 1));
  CHECK_THROWS_WITH(read_npy(dir.file("cut.npy")), Catch::Contains("cut.npy") && Catch::Contains("24 data bytes"));
  write_bytes(dir.file("tiny.npy"), {0x93, 'N'});
  CHECK_THROWS_AS(read_npy(dir.file("tiny.npy")), IOError);
  CHECK_THROWS_AS(read_npy(dir.file("absent.npy")), IOError);
  CHECK_THROWS_WITH(read_npy(dir.file("absent.npy")), Catch::Contains("absent.npy"));
  CHECK_THROWS_AS(write_npy(dir.file("no/such/dir.npy"), Tensor::zeros({1})), IOError);
}

TEST_CASE("safetensors round-trips every dtype with metadata, zero-copy", "[io][safetensors]") {
  TempDir dir;
  std::map<std::string, Tensor> tensors;
  for (DType dtype :
       {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::boolean})
    tensors[name(dtype)] = sample(dtype, {2, 3});
  tensors["scalar"] = Tensor::scalar<float>(2.5f);
  tensors["empty"] = Tensor::zeros({0, 4});
  tensors["view"] = sample(DType::f32, {3, 4}).transpose(0, 1).slice(0, 1, 3);
  write_safetensors(dir.file("t.safetensors"), tensors, {{"format", "pt"}});

  std::map<std::string, std::string> metadata;
  auto back = read_safetensors(dir.file("t.safetensors"), &metadata);
  CHECK(metadata == std::map<std::string, std::string>{{"format", "pt"}});
  REQUIRE(back.size() == tensors.size());
  for (const auto& [key, t] : tensors) {
    INFO(key);
    CHECK(back.at(key).meta() == t.meta());
    CHECK(back.at(key).to_vector<double>() == t.to_vector<double>());
  }
  // Zero-copy: the tensors lie in one mapping, at their file offsets (f64 first: wider dtypes lead).
  const auto* f64 = static_cast<const uint8_t*>(back.at("f64").raw_data());
  const auto* i64 = static_cast<const uint8_t*>(back.at("i64").raw_data());
  CHECK(std::abs(i64 - f64) == 48);
  // The mapping outlives the map; writing through a tensor copies and never reaches the file.
  Tensor kept = back.at("f32");
  back.clear();
  CHECK(kept.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5});
  kept.mutable_data<float>()[0] = 42;
  CHECK(kept.to_vector<float>()[0] == 42);
  CHECK(read_safetensors(dir.file("t.safetensors")).at("f32").to_vector<float>()[0] == 0);
  // An empty set is a valid file too.
  write_safetensors(dir.file("none.safetensors"), {});
  CHECK(read_safetensors(dir.file("none.safetensors")).empty());
}

TEST_CASE("safetensors reads files written to the spec by Python", "[io][safetensors]") {
  std::map<std::string, std::string> metadata;
  auto t = read_safetensors(kIo + "reference.safetensors", &metadata);
  CHECK(metadata.at("format") == "pt");
  CHECK(metadata.at("source") == "make_fixtures.py");
  CHECK(t.at("f32").to_vector<float>() == std::vector<float>{0, 0.25, 0.5, 0.75, 1, 1.25});
  CHECK(t.at("u8").to_vector<int64_t>() == std::vector<int64_t>{250, 253});
  // f64 starts at an unaligned offset in this file: read through a copy.
  CHECK(t.at("f64").to_vector<double>() == std::vector<double>{-2.5, -1.5, -0.5, 0.5, 1.5, 2.5});
  CHECK(t.at("f16").dtype() == DType::f16);
  CHECK(t.at("f16").to_vector<float>() == std::vector<float>{0, 0.125, 0.25, 0.375, 0.5, 0.625});
  CHECK(t.at("bf16").dtype() == DType::bf16);
  CHECK(t.at("bf16").to_vector<float>() == std::vector<float>{0, 3, 6, 9, 12, 15});
  CHECK(t.at("i32").to_vector<int32_t>() == std::vector<int32_t>{-3, -2, -1, 0, 1, 2});
  CHECK(t.at("i64").to_vector<int64_t>()[5] == (int64_t{5} << 40));
  CHECK(t.at("bool").to_vector<bool>() == std::vector<bool>{true, false, true, false, true, false});
  CHECK(t.at("scalar").shape() == Shape{});
  CHECK(t.at("scalar").item<float>() == 7.5f);
  CHECK(t.at("empty").shape() == Shape{0, 3});
  // The fixture the LSTM tests use, written by another script.
  const auto lstm = read_safetensors(std::string(TROUPE_FIXTURES) + "/lstm/lstm_small.safetensors");
  CHECK(lstm.at("x").shape() == Shape{5, 3, 6});
}

TEST_CASE("safetensors validates the header before touching data", "[io][safetensors][errors]") {
  TempDir dir;
  const std::vector<uint8_t> eight(8, 0);
  auto entry = [](const char* dtype, const char* shape, const char* offsets) {
    return std::string("\"t\":{\"dtype\":\"") + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
  };
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> broken = {
      {"empty file", {}},
      {"short length", {1, 0, 0}},
      {"length beyond the file", safetensors_bytes("{}", {})},  // patched below
      {"not json", safetensors_bytes("{\"t\":", {})},
      {"not an object", safetensors_bytes("[1,2]", {})},
      {"missing fields", safetensors_bytes("{\"t\":{\"dtype\":\"F32\"}}", eight)},
      {"negative dim", safetensors_bytes("{" + entry("F32", "[-2]", "[0,8]") + "}", eight)},
      {"offsets out of bounds", safetensors_bytes("{" + entry("F32", "[2]", "[8,16]") + "}", eight)},
      {"reversed offsets", safetensors_bytes("{" + entry("U8", "[0]", "[8,0]") + "}", eight)},
      {"length mismatch", safetensors_bytes("{" + entry("F32", "[3]", "[0,8]") + "}", eight)},
      {"huge shape", safetensors_bytes("{" + entry("F64", "[4294967296,4294967296,4294967296]", "[0,8]") + "}", eight)},
      {"overlap", safetensors_bytes("{" + entry("F32", "[2]", "[0,8]") +
                                        ",\"u\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", eight)},
      {"hole", safetensors_bytes("{" + entry("F32", "[1]", "[4,8]") + "}", eight)},
      {"trailing bytes", safetensors_bytes("{" + entry("F32", "[1]", "[0,4]") + "}", eight)},
      {"bad metadata", safetensors_bytes("{\"__metadata__\":{\"a\":1}}", {})},
      {"bool byte", safetensors_bytes("{" + entry("BOOL", "[8]", "[0,8]") + "}", {0, 1, 2, 0, 0, 0, 0, 0})},
  };
  for (size_t i = 0; i < broken.size(); ++i) {
    auto [what, bytes] = broken[i];
    if (what == "length beyond the file") bytes[0] = 200;
    INFO(what);
    write_bytes(dir.file("bad.safetensors"), bytes);
    CHECK_THROWS_AS(read_safetensors(dir.file("bad.safetensors")), IOError);
    CHECK_THROWS_WITH(read_safetensors(dir.file("bad.safetensors")), Catch::Contains("bad.safetensors"));
  }
  write_bytes(dir.file("i8.safetensors"), safetensors_bytes("{" + entry("I8", "[8]", "[0,8]") + "}", eight));
  CHECK_THROWS_AS(read_safetensors(dir.file("i8.safetensors")), DTypeError);
  CHECK_THROWS_WITH(read_safetensors(dir.file("i8.safetensors")),
                    Catch::Contains("i8.safetensors") && Catch::Contains("I8"));
  CHECK_THROWS_AS(read_safetensors(dir.file("absent.safetensors")), IOError);
  CHECK_THROWS_AS(write_safetensors(dir.file("m.safetensors"), {{"__metadata__", Tensor::zeros({1})}}), ValueError);
  CHECK_THROWS_AS(write_safetensors(dir.file("u.safetensors"), {{"u", Tensor()}}), ValueError);
  CHECK_THROWS_AS(write_safetensors(dir.file("no/such/dir.safetensors"), {{"a", Tensor::zeros({1})}}), IOError);
}
