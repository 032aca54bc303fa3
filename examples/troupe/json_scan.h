#pragma once
// JsonScan: walks a JSON text in place for `troupe trace merge`, handing out each member's key
// and where its value starts, without building a document. A long job's traces are gigabytes of
// events of which the merge changes three fields; building them as nlohmann::json spends its time
// allocating (a 3 s, 2-rank trace took 5 s to merge that way).
//
//   JsonScan scan(text);
//   scan.members(scan.skip_space(text.data()), [&](std::string_view key, const char* value) {
//     if (key == "traceEvents") return scan.elements(value, [&](const char* e) { return scan.skip_value(e); });
//     return scan.skip_value(value);   // each callback returns where its value ends
//   });
//
// Values are checked only as far as finding where they end takes: a merge copies them through as
// they were written, so its output is as valid as its input. Malformed text is an IOError naming
// the byte where it went wrong.
#include <string>
#include <string_view>

#include "devices/error.h"

namespace troupe::cli {

class JsonScan {
 public:
  explicit JsonScan(std::string_view text) : begin_(text.data()), end_(text.data() + text.size()) {}

  const char* skip_space(const char* p) const {
    while (p < end_ && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) ++p;
    return p;
  }

  // p at a value's first character; returns the character after it.
  const char* skip_value(const char* p) const {
    if (p >= end_) fail(p, "a value");
    if (*p == '"') return skip_string(p);
    if (*p == '{' || *p == '[') return skip_container(p);
    const char* q = p;
    while (q < end_ && !is_delimiter(*q)) ++q;
    if (q == p) fail(p, "a value");
    return q;
  }

  // p at '{': calls fn(key, value start) for each member, fn returning where the value ends;
  // returns the character after the '}'. fn returning nullptr stops there (members returns nullptr).
  template <class Fn>
  const char* members(const char* p, Fn&& fn) const {
    p = expect(p, '{');
    if (p < end_ && *p == '}') return p + 1;
    for (;;) {
      if (p >= end_ || *p != '"') fail(p, "a key");
      const char* key_end = skip_string(p);
      const std::string_view key(p + 1, static_cast<size_t>(key_end - p - 2));
      const char* value_end = fn(key, expect(skip_space(key_end), ':'));
      if (!value_end) return nullptr;
      p = skip_space(value_end);
      if (p < end_ && *p == ',') {
        p = skip_space(p + 1);
        continue;
      }
      return close(p, '}');
    }
  }

  // p at '[': calls fn(element start) for each element, fn returning where it ends; returns the
  // character after the ']'.
  template <class Fn>
  const char* elements(const char* p, Fn&& fn) const {
    p = expect(p, '[');
    if (p < end_ && *p == ']') return p + 1;
    for (;;) {
      p = skip_space(fn(p));
      if (p < end_ && *p == ',') {
        p = skip_space(p + 1);
        continue;
      }
      return close(p, ']');
    }
  }

  [[noreturn]] void fail(const char* p, const std::string& wanted) const {
    throw IOError("expected " + wanted + " at byte " + std::to_string(p - begin_) +
                  (p >= end_ ? " (the text ends there)" : ""));
  }

 private:
  static bool is_delimiter(char c) {
    return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == ':';
  }

  // p at c: the first non-space character after it.
  const char* expect(const char* p, char c) const {
    if (p >= end_ || *p != c) fail(p, std::string{'\'', c, '\''});
    return skip_space(p + 1);
  }
  const char* close(const char* p, char c) const {
    if (p >= end_ || *p != c) fail(p, c == '}' ? "',' or '}'" : "',' or ']'");
    return p + 1;
  }

  // p at the opening quote: the character after the closing one. Names and args are short: a
  // loop beats memchr's call.
  const char* skip_string(const char* p) const {
    for (const char* q = p + 1; q < end_; ++q) {
      if (*q == '\\') ++q;
      else if (*q == '"') return q + 1;
    }
    fail(end_, "the end of a string");
  }

  const char* skip_container(const char* p) const {
    int depth = 0;
    for (const char* q = p; q < end_;) {
      const char c = *q;
      if (c == '"') {
        q = skip_string(q);
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      if ((c == '}' || c == ']') && --depth == 0) return q + 1;
      ++q;
    }
    fail(end_, *p == '{' ? "'}'" : "']'");
  }

  const char* begin_;
  const char* end_;
};

}  // namespace troupe::cli
