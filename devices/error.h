#pragma once
// Troupe's exceptions. Every message names the op and the shapes, dtypes, devices or ranks involved:
//
//   throw ShapeError("matmul: inner dimensions differ: f32[2,3] @ f32[4,5]");
#include <stdexcept>
#include <string>

namespace troupe {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ShapeError : public Error { using Error::Error; };   // incompatible or invalid shapes
class DTypeError : public Error { using Error::Error; };   // unsupported or mismatched element types
class DeviceError : public Error { using Error::Error; };  // wrong device, no kernel, CUDA failures
class IndexError : public Error { using Error::Error; };   // an index out of range (names the index)
class ValueError : public Error { using Error::Error; };   // bad attribute, argument or op name
class IOError : public Error { using Error::Error; };      // files: npy, safetensors, datasets
class CommError : public Error { using Error::Error; };    // transport and protocol failures
class PeerLostError : public CommError { using CommError::CommError; };  // a rank died or went away
class TimeoutError : public Error { using Error::Error; }; // an operation outlived its deadline

}  // namespace troupe
