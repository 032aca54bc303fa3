#pragma once
// Named attributes of an op call (dim, keepdim, batch_dims, ...), typed by the op's schema.
//
//   Attrs a{{"dims", std::vector<int64_t>{1}}, {"keepdim", true}};
//   int64_t d = a.get<std::vector<int64_t>>("dims")[0];
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace troupe {

using AttrValue = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>>;
enum class AttrType : uint8_t { boolean, integer, real, string, int_list };

const char* name(AttrType t);
AttrType type_of(const AttrValue& v);
std::string to_string(const AttrValue& v);
// Parses command-line text as the given type: "true", "3", "0.5", "tanh", "1,2,3".
AttrValue parse_attr(std::string_view op, std::string_view attr, AttrType type, std::string_view text);

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string, AttrValue>> items);

  Attrs& set(std::string name, AttrValue value);
  bool has(std::string_view name) const;
  const AttrValue* find(std::string_view name) const;
  // The value of name as T; ValueError when it is missing or of another type.
  template <class T>
  const T& get(std::string_view name) const {
    const AttrValue* v = find(name);
    if (!v) missing(name);
    if (!std::holds_alternative<T>(*v)) wrong_type(name, *v);
    return std::get<T>(*v);
  }
  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }
  std::string str() const;  // "dims=[1] keepdim=true"

 private:
  [[noreturn]] static void missing(std::string_view name);
  [[noreturn]] static void wrong_type(std::string_view name, const AttrValue& v);
  std::vector<std::pair<std::string, AttrValue>> items_;
};

}  // namespace troupe
