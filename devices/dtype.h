#pragma once
// Element types of tensors, their sizes and names, type promotion, and the two 16-bit floats.
//
//   DType t = promote(DType::i32, DType::f32);        // f32
//   dispatch(t, [&](auto tag) { using T = typename decltype(tag)::type; ... });
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace troupe {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8, boolean };

// IEEE binary16, stored as bits; arithmetic happens in float.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f);
  operator float() const;
};

// bfloat16 (the top half of a float), round-to-nearest-even on conversion, NaN kept a quiet NaN.
// Inline and without branches, so that loops converting rows vectorise (a call per element made
// bf16 attention twice as slow as f32).
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (x >> 16) | 0x40u;
    const uint32_t is_nan = 0u - static_cast<uint32_t>((x & 0x7fffffffu) > 0x7f800000u);
    bits = static_cast<uint16_t>((quiet_nan & is_nan) | (rounded & ~is_nan));
  }
  operator float() const { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }
};

size_t itemsize(DType t);
const char* name(DType t);               // "f32", "bf16", "bool", ...
DType dtype_from_name(std::string_view);  // accepts our names and numpy/torch ones ("float32", "int64")
bool is_floating(DType t);               // f32 f64 f16 bf16
// The result type of a binary op, PyTorch's rules for tensors of equal standing:
// bool < u8 < i32 < i64 < (f16, bf16) < f32 < f64; f16 with bf16 gives f32.
DType promote(DType a, DType b);

template <class T> struct TypeTag { using type = T; };
template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<Half>() { return DType::f16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::bf16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<bool>() { return DType::boolean; }

// Calls fn(TypeTag<T>{}) with T the C++ type of t.
template <class Fn>
decltype(auto) dispatch(DType t, Fn&& fn) {
  switch (t) {
    case DType::f32: return fn(TypeTag<float>{});
    case DType::f64: return fn(TypeTag<double>{});
    case DType::f16: return fn(TypeTag<Half>{});
    case DType::bf16: return fn(TypeTag<BFloat16>{});
    case DType::i32: return fn(TypeTag<int32_t>{});
    case DType::i64: return fn(TypeTag<int64_t>{});
    case DType::u8: return fn(TypeTag<uint8_t>{});
    case DType::boolean: return fn(TypeTag<bool>{});
  }
  return fn(TypeTag<float>{});  // unreachable: every enumerator is handled above
}

// Converts between element types through float/double/int64 as fits; bool is (x != 0).
template <class To, class From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<float>(v) != 0.0f;
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return static_cast<To>(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace troupe
