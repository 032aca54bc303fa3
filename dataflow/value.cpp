#include "dataflow/value.h"

#include <cxxabi.h>

#include <cstdlib>

namespace troupe {

std::string demangled_type_name(const std::type_info& type) {
  int status = 0;
  char* readable = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string out = status == 0 && readable ? readable : type.name();
  std::free(readable);
  return out;
}

}  // namespace troupe
