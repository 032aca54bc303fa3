#pragma once
// Troupe's exceptions. Every message names the op and the shapes, dtypes, devices or ranks involved:
//
//   throw ShapeError("matmul: inner dimensions differ: f32[2,3] @ f32[4,5]");
//
// Each type names its kind (TROUPE_ERROR_KIND), and registers it in the error-kind table
// (devices/error_kinds.h), so an error that crosses a rank or a graph node comes back as the same
// type. A new error type: derive, add TROUPE_ERROR_KIND(Name), register with ErrorKindRegistrar.
// The network's errors (CommError, PeerLostError) are the net layer's: net/errors.h.
#include <stdexcept>
#include <string>

namespace troupe {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  // The registered name of the most derived type ("ShapeError"): what crosses ranks.
  virtual const char* kind() const noexcept { return "Error"; }
};

// The kind a type reports: its own name, so a subclass never answers as its base.
#define TROUPE_ERROR_KIND(Type) \
  const char* kind() const noexcept override { return #Type; }

class ShapeError : public Error {  // incompatible or invalid shapes
 public:
  using Error::Error;
  TROUPE_ERROR_KIND(ShapeError)
};
class DTypeError : public Error {  // unsupported or mismatched element types
 public:
  using Error::Error;
  TROUPE_ERROR_KIND(DTypeError)
};
class DeviceError : public Error {  // wrong device, no kernel, CUDA failures
 public:
  using Error::Error;
  TROUPE_ERROR_KIND(DeviceError)
};
class IndexError : public Error {  // an index out of range (names the index)
 public:
  using Error::Error;
  TROUPE_ERROR_KIND(IndexError)
};
class ValueError : public Error {  // bad attribute, argument or op name
 public:
  using Error::Error;
  TROUPE_ERROR_KIND(ValueError)
};
class IOError : public Error {  // files: npy, safetensors, datasets
 public:
  using Error::Error;
  TROUPE_ERROR_KIND(IOError)
};
class TimeoutError : public Error {  // an operation outlived its deadline
 public:
  using Error::Error;
  TROUPE_ERROR_KIND(TimeoutError)
};
class CancelledError : public Error {  // the caller cancelled the work (a graph invocation, a request)
 public:
  using Error::Error;
  TROUPE_ERROR_KIND(CancelledError)
};

}  // namespace troupe
