#include "devices/error_kinds.h"

#include <map>
#include <mutex>

namespace troupe {

namespace {

struct Table {
  std::mutex mutex;
  std::map<std::string, ErrorFactory, std::less<>> factories;
};

Table& table() {
  static Table t;
  return t;
}

ErrorKindRegistrar<Error> error_kind;
ErrorKindRegistrar<ShapeError> shape_error_kind;
ErrorKindRegistrar<DTypeError> dtype_error_kind;
ErrorKindRegistrar<DeviceError> device_error_kind;
ErrorKindRegistrar<IndexError> index_error_kind;
ErrorKindRegistrar<ValueError> value_error_kind;
ErrorKindRegistrar<IOError> io_error_kind;
ErrorKindRegistrar<TimeoutError> timeout_error_kind;
ErrorKindRegistrar<CancelledError> cancelled_error_kind;

}  // namespace

std::string ErrorRecord::serialize() const {
  std::string out = kind;
  out.push_back('\0');
  out += message;
  return out;
}

ErrorRecord ErrorRecord::parse(std::string_view bytes) {
  const size_t end = bytes.find('\0');
  if (end == std::string_view::npos || end == 0)
    throw ValueError("error record: " + std::to_string(bytes.size()) + " bytes without a kind before a NUL byte");
  return {std::string(bytes.substr(0, end)), std::string(bytes.substr(end + 1))};
}

void register_error_kind(const std::string& kind, ErrorFactory make) {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  if (!t.factories.emplace(kind, make).second) throw ValueError("error kind '" + kind + "' is registered twice");
}

std::vector<std::string> registered_error_kinds() {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  std::vector<std::string> kinds;
  for (const auto& [kind, make] : t.factories) kinds.push_back(kind);
  return kinds;
}

ErrorRecord encode_error(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return {e.kind(), e.what()};
  } catch (const std::exception& e) {
    return {"Error", e.what()};
  } catch (...) {
    return {"Error", "unknown exception"};
  }
}

std::exception_ptr decode_error(const ErrorRecord& record) {
  ErrorFactory make = nullptr;
  {
    Table& t = table();
    std::lock_guard lock(t.mutex);
    auto it = t.factories.find(record.kind);
    if (it != t.factories.end()) make = it->second;
  }
  if (!make) return std::make_exception_ptr(Error("(" + record.kind + ") " + record.message));
  return make(record.message);
}

std::exception_ptr with_context(const std::string& where, std::exception_ptr error) {
  ErrorRecord record = encode_error(error);
  if (record.kind == "CancelledError") return error;
  record.message = where + record.message;
  return decode_error(record);
}

}  // namespace troupe
