#pragma once
// The error-kind table: how a typed error crosses a boundary (a rank, a graph node, an actor)
// and comes back as the same type. Every error type registers here under its kind() name.
//
//   ErrorRecord r = encode_error(std::current_exception());  // {"ShapeError", "matmul: ..."}
//   std::string wire = r.serialize();                         // bytes for a frame
//   std::rethrow_exception(decode_error(ErrorRecord::parse(wire)));     // throws ShapeError
//   std::rethrow_exception(with_context("node 'h': ", std::current_exception()));  // same type
//
// Registering a new type (in the .cpp that defines it; the registrar runs when the library loads):
//
//   static ErrorKindRegistrar<GraphError> graph_error_kind;  // needs GraphError(std::string)
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "devices/error.h"

namespace troupe {

struct ErrorRecord {
  std::string kind;  // a registered kind() name; "Error" for anything else
  std::string message;

  // "kind\0message": the form frames carry. parse() throws ValueError on bytes without the kind.
  std::string serialize() const;
  static ErrorRecord parse(std::string_view bytes);
};

using ErrorFactory = std::exception_ptr (*)(const std::string& message);

// ValueError when the kind is taken.
void register_error_kind(const std::string& kind, ErrorFactory make);
std::vector<std::string> registered_error_kinds();  // sorted

// Any exception: a troupe Error by its kind(), anything else as "Error" with its what().
ErrorRecord encode_error(std::exception_ptr error);
// The registered type with the message; an unknown kind gives Error, its message naming the kind.
std::exception_ptr decode_error(const ErrorRecord& record);
// The same type with `where` in front of its message; CancelledError passes unchanged.
std::exception_ptr with_context(const std::string& where, std::exception_ptr error);

template <class E>
struct ErrorKindRegistrar {
  ErrorKindRegistrar() {
    register_error_kind(E(std::string()).kind(),
                        [](const std::string& message) { return std::make_exception_ptr(E(message)); });
  }
};

}  // namespace troupe
