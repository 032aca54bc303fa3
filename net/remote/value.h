#pragma once
// WireValue: what crosses ranks as a remote actor's constructor arguments, method arguments and
// results. A tree of none, bool, int, float, string, tensor and list; C++ types map onto it
// through Codec<T>, so actors are written with ordinary signatures. (Not troupe::Value, what
// travels along a dataflow edge inside a process: dataflow/value.h.)
//
//   struct Config {
//     int64_t hidden = 0;
//     std::string name;
//     TROUPE_FIELDS(hidden, name)                    // a small struct travels as its fields
//   };
//   WireValue v = to_value(std::vector<Tensor>{a, b});  // a list of two tensors
//   auto ts = v.as<std::vector<Tensor>>();              // ValueError when v holds something else
//   Tensor t = to_value(a);                             // conversion to any decodable type
//
// Codecs: bool, integers (range-checked), float/double, std::string (and const char* to send),
// Tensor, std::vector<T>, std::pair, std::tuple, std::optional<T> (none when empty), WireValue,
// std::exception_ptr (none when null; comes back as the same error type) and
// default-constructible structs with TROUPE_FIELDS. Tensors are never copied into a WireValue's
// bytes: on the wire each one is a message part of its own (net/remote/call_frame.h).
#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "devices/error.h"
#include "devices/tensor.h"

namespace troupe::net {

class WireValue;

template <class T, class = void>
struct Codec;  // Codec<T>::encode(const T&) -> WireValue, decode(const WireValue&) -> T

template <class T>
concept Decodable = requires(const WireValue& v) {
  { Codec<T>::decode(v) } -> std::same_as<T>;
};

class WireValue {
 public:
  using List = std::vector<WireValue>;
  enum class Kind : uint8_t { none, boolean, integer, real, string, tensor, list };

  WireValue() = default;  // none
  static WireValue boolean(bool b) { return WireValue(Variant(std::in_place_index<1>, b)); }
  static WireValue integer(int64_t i) { return WireValue(Variant(std::in_place_index<2>, i)); }
  static WireValue real(double d) { return WireValue(Variant(std::in_place_index<3>, d)); }
  static WireValue string(std::string s) { return WireValue(Variant(std::in_place_index<4>, std::move(s))); }
  static WireValue tensor(Tensor t) { return WireValue(Variant(std::in_place_index<5>, std::move(t))); }
  static WireValue list(List items) { return WireValue(Variant(std::in_place_index<6>, std::move(items))); }

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_none() const { return kind() == Kind::none; }
  // Each throws ValueError naming what the value holds instead.
  bool as_bool() const { return get<1>("a bool"); }
  int64_t as_int() const { return get<2>("an int"); }
  double as_real() const;  // an int converts
  const std::string& as_string() const { return get<4>("a string"); }
  const Tensor& as_tensor() const { return get<5>("a tensor"); }
  const List& as_list() const { return get<6>("a list"); }
  List& as_list() { return const_cast<List&>(std::as_const(*this).as_list()); }

  template <class T>
  T as() const {
    return Codec<T>::decode(*this);
  }
  // Lets `Tensor y = wait(actor.request("forward", x));` read naturally.
  template <class T>
    requires(!std::is_same_v<T, WireValue> && Decodable<T>)
  operator T() const {
    return as<T>();
  }

  // "a tensor f32[2,3]", "an int", "a list of 3", "none": for error messages.
  std::string describe() const;
  // Every tensor the value holds, depth first, appended to `out`.
  void collect_tensors(std::vector<Tensor>& out) const;

 private:
  using Variant = std::variant<std::monostate, bool, int64_t, double, std::string, Tensor, List>;
  explicit WireValue(Variant v) : v_(std::move(v)) {}
  template <size_t I>
  const std::variant_alternative_t<I, Variant>& get(const char* wanted) const {
    if (v_.index() != I) expected(wanted);
    return std::get<I>(v_);
  }
  [[noreturn]] void expected(const char* wanted) const;

  Variant v_;
};

template <class T>
WireValue to_value(const T& x) {
  return Codec<std::decay_t<T>>::encode(x);  // decayed: a string literal is a char*
}

namespace detail {
// "argument 2: " in front of a decoding error, keeping its type.
[[noreturn]] void rethrow_in(const std::string& where);

// The list of the values' encodings, each made in its place (WireValue::list({...}) would copy
// every item out of the initializer list, a whole tree for a struct or a list): a call's arguments.
template <class... T>
WireValue list_of(const T&... xs) {
  WireValue::List items;
  items.reserve(sizeof...(T));
  (items.push_back(to_value(xs)), ...);
  return WireValue::list(std::move(items));
}
}  // namespace detail

// A struct whose listed members travel as a list, in order: TROUPE_FIELDS(hidden, name).
#define TROUPE_FIELDS(...)                                                   \
  auto troupe_fields() { return std::tie(__VA_ARGS__); }                     \
  auto troupe_fields() const { return std::tie(__VA_ARGS__); }               \
  static constexpr const char* troupe_field_names() { return #__VA_ARGS__; }

template <>
struct Codec<WireValue> {
  static WireValue encode(const WireValue& v) { return v; }
  static WireValue decode(const WireValue& v) { return v; }
};

template <>
struct Codec<bool> {
  static WireValue encode(bool b) { return WireValue::boolean(b); }
  static bool decode(const WireValue& v) { return v.as_bool(); }
};

template <class T>
struct Codec<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>> {
  static WireValue encode(T x) {
    if constexpr (std::is_unsigned_v<T> && sizeof(T) == 8)
      if (x > static_cast<T>(std::numeric_limits<int64_t>::max()))
        throw ValueError("to_value: " + std::to_string(x) + " does not fit an int64");
    return WireValue::integer(static_cast<int64_t>(x));
  }
  static T decode(const WireValue& v) {
    const int64_t i = v.as_int();
    if (!std::in_range<T>(i))
      throw ValueError("expected an int in [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
                       std::to_string(std::numeric_limits<T>::max()) + "], got " + std::to_string(i));
    return static_cast<T>(i);
  }
};

template <class T>
struct Codec<T, std::enable_if_t<std::is_floating_point_v<T>>> {
  static WireValue encode(T x) { return WireValue::real(static_cast<double>(x)); }
  static T decode(const WireValue& v) { return static_cast<T>(v.as_real()); }
};

template <>
struct Codec<std::string> {
  static WireValue encode(const std::string& s) { return WireValue::string(s); }
  static std::string decode(const WireValue& v) { return v.as_string(); }
};

template <>
struct Codec<const char*> {  // sending only: a string literal argument
  static WireValue encode(const char* s) { return WireValue::string(s); }
};
template <>
struct Codec<char*> : Codec<const char*> {};

template <>
struct Codec<Tensor> {
  static WireValue encode(const Tensor& t) {
    if (!t.defined()) throw ValueError("to_value: the tensor is undefined");
    return WireValue::tensor(t);
  }
  static Tensor decode(const WireValue& v) { return v.as_tensor(); }
};

// An error travels as [kind, message] and comes back as the same type (devices/error_kinds.h;
// a kind unknown to the receiver comes back as Error naming it); null travels as none.
template <>
struct Codec<std::exception_ptr> {
  static WireValue encode(const std::exception_ptr& error);
  static std::exception_ptr decode(const WireValue& v);
};

template <class T>
struct Codec<std::optional<T>> {
  static WireValue encode(const std::optional<T>& x) { return x ? to_value(*x) : WireValue(); }
  static std::optional<T> decode(const WireValue& v) {
    if (v.is_none()) return std::nullopt;
    return Codec<T>::decode(v);
  }
};

template <class T>
struct Codec<std::vector<T>> {
  static WireValue encode(const std::vector<T>& xs) {
    WireValue::List items;
    items.reserve(xs.size());
    for (const auto& x : xs) items.push_back(to_value(x));
    return WireValue::list(std::move(items));
  }
  static std::vector<T> decode(const WireValue& v) {
    const WireValue::List& items = v.as_list();
    std::vector<T> out;
    out.reserve(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      try {
        out.push_back(Codec<T>::decode(items[i]));
      } catch (...) {
        detail::rethrow_in("item " + std::to_string(i) + ": ");
      }
    }
    return out;
  }
};

namespace detail {

template <class Tuple>
WireValue encode_tuple(const Tuple& t) {
  return std::apply([](const auto&... x) { return list_of(x...); }, t);
}

// Decodes a list of exactly sizeof...(T) items into a tuple of values; `what` names an item
// in errors ("argument", "field").
template <class... T>
std::tuple<T...> decode_tuple(const WireValue& v, const char* what) {
  const WireValue::List& items = v.as_list();
  if (items.size() != sizeof...(T))
    throw ValueError("expected " + std::to_string(sizeof...(T)) + " " + what + (sizeof...(T) == 1 ? "" : "s") +
                     ", got " + std::to_string(items.size()));
  return [&]<size_t... I>(std::index_sequence<I...>) {
    return std::tuple<T...>{[&]() -> T {
      try {
        return Codec<T>::decode(items[I]);
      } catch (...) {
        rethrow_in(std::string(what) + " " + std::to_string(I + 1) + ": ");
      }
    }()...};
  }(std::index_sequence_for<T...>{});
}

}  // namespace detail

template <class... T>
struct Codec<std::tuple<T...>> {
  static WireValue encode(const std::tuple<T...>& t) { return detail::encode_tuple(t); }
  static std::tuple<T...> decode(const WireValue& v) { return detail::decode_tuple<T...>(v, "item"); }
};

template <class A, class B>
struct Codec<std::pair<A, B>> {
  static WireValue encode(const std::pair<A, B>& p) { return detail::encode_tuple(std::tie(p.first, p.second)); }
  static std::pair<A, B> decode(const WireValue& v) {
    auto [a, b] = detail::decode_tuple<A, B>(v, "item");
    return {std::move(a), std::move(b)};
  }
};

template <class T>
struct Codec<T, std::enable_if_t<requires(const T& x) { x.troupe_fields(); }>> {
  static WireValue encode(const T& x) { return detail::encode_tuple(x.troupe_fields()); }
  static T decode(const WireValue& v) {
    using Fields = decltype(std::declval<T&>().troupe_fields());  // std::tuple<F&...>
    T out{};
    decode_into(out.troupe_fields(), v, static_cast<Fields*>(nullptr));
    return out;
  }

 private:
  template <class... F>
  static void decode_into(std::tuple<F&...> fields, const WireValue& v, std::tuple<F&...>*) {
    fields = detail::decode_tuple<std::remove_cvref_t<F>...>(v, "field");
  }
};

}  // namespace troupe::net
