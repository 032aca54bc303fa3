#pragma once
// The network's exceptions: what a transport, a protocol or a lost rank raises. Like every Troupe
// error (devices/error.h) each names its kind and is registered in the error-kind table
// (devices/error_kinds.h, when the net library loads), so it crosses ranks as the same type.
//
//   throw CommError("transport: rank 1 sent a bad frame: frame: malformed: bad magic");
//   catch (const PeerLostError& e) { /* a rank died or said goodbye */ }
#include "devices/error.h"

namespace troupe {

class CommError : public Error {  // transport and protocol failures
 public:
  using Error::Error;
  TROUPE_ERROR_KIND(CommError)
};
class PeerLostError : public CommError {  // a rank died or went away
 public:
  using CommError::CommError;
  TROUPE_ERROR_KIND(PeerLostError)
};

}  // namespace troupe
