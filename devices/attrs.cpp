#include "devices/attrs.h"

#include <charconv>
#include <cstdlib>

#include "devices/error.h"

namespace troupe {

const char* name(AttrType t) {
  switch (t) {
    case AttrType::boolean: return "bool";
    case AttrType::integer: return "int";
    case AttrType::real: return "float";
    case AttrType::string: return "string";
    case AttrType::int_list: return "int list";
  }
  return "?";
}

AttrType type_of(const AttrValue& v) { return static_cast<AttrType>(v.index()); }

std::string to_string(const AttrValue& v) {
  switch (type_of(v)) {
    case AttrType::boolean: return std::get<bool>(v) ? "true" : "false";
    case AttrType::integer: return std::to_string(std::get<int64_t>(v));
    case AttrType::real: {
      char buf[32];
      auto [end, ec] = std::to_chars(buf, buf + sizeof buf, std::get<double>(v));
      return std::string(buf, end);
    }
    case AttrType::string: return std::get<std::string>(v);
    case AttrType::int_list: {
      std::string s = "[";
      for (int64_t x : std::get<std::vector<int64_t>>(v)) s += (s.size() > 1 ? "," : "") + std::to_string(x);
      return s + "]";
    }
  }
  return "?";
}

namespace {

bool parse_int(std::string_view text, int64_t& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

}  // namespace

AttrValue parse_attr(std::string_view op, std::string_view attr, AttrType type, std::string_view text) {
  auto bad = [&]() -> AttrValue {
    throw ValueError(std::string(op) + ": attribute " + std::string(attr) + " expects " + name(type) + ", got '" +
                     std::string(text) + "'");
  };
  switch (type) {
    case AttrType::boolean:
      if (text == "true" || text == "1") return true;
      if (text == "false" || text == "0") return false;
      return bad();
    case AttrType::integer: {
      int64_t v;
      return parse_int(text, v) ? AttrValue(v) : bad();
    }
    case AttrType::real: {
      std::string s(text);
      char* end = nullptr;
      double v = std::strtod(s.c_str(), &end);
      return (!s.empty() && end == s.c_str() + s.size()) ? AttrValue(v) : bad();
    }
    case AttrType::string: return std::string(text);
    case AttrType::int_list: {
      std::vector<int64_t> list;
      std::string_view rest = text;
      if (!rest.empty() && rest.front() == '[' && rest.back() == ']') rest = rest.substr(1, rest.size() - 2);
      while (!rest.empty()) {
        const size_t comma = rest.find(',');
        int64_t v;
        if (!parse_int(rest.substr(0, comma), v)) return bad();
        list.push_back(v);
        if (comma == std::string_view::npos) break;
        rest = rest.substr(comma + 1);
      }
      return list;
    }
  }
  return bad();
}

Attrs::Attrs(std::initializer_list<std::pair<std::string, AttrValue>> items) {
  for (auto& [k, v] : items) set(k, v);
}

Attrs& Attrs::set(std::string name, AttrValue value) {
  for (auto& item : items_)
    if (item.first == name) {
      item.second = std::move(value);
      return *this;
    }
  items_.emplace_back(std::move(name), std::move(value));
  return *this;
}

const AttrValue* Attrs::find(std::string_view name) const {
  for (auto& item : items_)
    if (item.first == name) return &item.second;
  return nullptr;
}

bool Attrs::has(std::string_view name) const { return find(name) != nullptr; }

std::string Attrs::str() const {
  std::string s;
  for (auto& [k, v] : items_) s += (s.empty() ? "" : " ") + k + "=" + to_string(v);
  return s;
}

void Attrs::missing(std::string_view name) { throw ValueError("attribute '" + std::string(name) + "' is not set"); }

void Attrs::wrong_type(std::string_view name, const AttrValue& v) {
  throw ValueError("attribute '" + std::string(name) + "' holds a " + troupe::name(type_of(v)) + " (" +
                   to_string(v) + ")");
}

}  // namespace troupe
