#include "net/remote/value.h"

#include "devices/error_kinds.h"

namespace troupe::net {

double WireValue::as_real() const {
  if (kind() == Kind::integer) return static_cast<double>(std::get<int64_t>(v_));
  return get<3>("a float");
}

std::string WireValue::describe() const {
  switch (kind()) {
    case Kind::none: return "none";
    case Kind::boolean: return "a bool";
    case Kind::integer: return "an int";
    case Kind::real: return "a float";
    case Kind::string: return "a string";
    case Kind::tensor: return "a tensor " + std::get<Tensor>(v_).meta().str();
    case Kind::list: return "a list of " + std::to_string(std::get<List>(v_).size());
  }
  return "?";
}

void WireValue::collect_tensors(std::vector<Tensor>& out) const {
  if (kind() == Kind::tensor) out.push_back(std::get<Tensor>(v_));
  if (kind() == Kind::list)
    for (const WireValue& item : std::get<List>(v_)) item.collect_tensors(out);
}

void WireValue::expected(const char* wanted) const {
  throw ValueError(std::string("expected ") + wanted + ", got " + describe());
}

WireValue Codec<std::exception_ptr>::encode(const std::exception_ptr& error) {
  if (!error) return WireValue();
  ErrorRecord record = encode_error(error);
  return WireValue::list({WireValue::string(std::move(record.kind)), WireValue::string(std::move(record.message))});
}

std::exception_ptr Codec<std::exception_ptr>::decode(const WireValue& v) {
  if (v.is_none()) return nullptr;
  auto [kind, message] = detail::decode_tuple<std::string, std::string>(v, "item");
  if (kind.empty()) throw ValueError("expected an error's kind, got an empty string");
  return decode_error(ErrorRecord{std::move(kind), std::move(message)});
}

namespace detail {

void rethrow_in(const std::string& where) { std::rethrow_exception(with_context(where, std::current_exception())); }

}  // namespace detail
}  // namespace troupe::net
