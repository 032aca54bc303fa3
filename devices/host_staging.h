#pragma once
// HostStaging: a tensor's bytes on their way to host memory, for code that sends them (the
// transport, collectives). A device tensor is copied into pinned host memory on the calling
// thread's stream (its lane's) in pieces, each followed by an event, and the caller does not wait:
// whoever writes the bytes to the network waits for each piece just before it writes it, so the
// copy of piece k+1 overlaps the sending of piece k. A host tensor is ready at once.
//
//   HostStaging s = stage_to_host(x);            // never waits for the device
//   for (size_t at = 0; at < s.bytes(); at += n) {
//     s.wait_until(at + n);                      // the transport's thread, not the caller, waits
//     write(fd, s.data() + at, n);
//   }
#include <cstdint>
#include <utility>
#include <vector>

#include "devices/event.h"
#include "devices/tensor.h"

namespace troupe {

struct HostStaging {
  Tensor host;  // contiguous host bytes (pinned for a device tensor), whole once every piece is done
  // In order: bytes [0, end) of host are there once event is done. Empty: all there now.
  std::vector<std::pair<uint64_t, Event>> pieces;

  const uint8_t* data() const { return host.defined() ? static_cast<const uint8_t*>(host.raw_data()) : nullptr; }
  uint64_t bytes() const { return host.defined() ? static_cast<uint64_t>(host.nbytes()) : 0; }
  // Blocks until bytes [0, end) are there; not counted as a sync (for the transport's own threads).
  // Rethrows the error of the device work before the copy.
  void wait_until(uint64_t end) const;
  // The same for every byte, counted as a host sync naming `call` (for a caller that must wait).
  void synchronize(std::string_view call) const;
};

// t's bytes staged for sending as above: a device tensor in pieces of at least kStagingPiece bytes,
// at most kStagingPieces of them (so a small tensor is one piece).
HostStaging stage_to_host(const Tensor& t);
inline constexpr uint64_t kStagingPiece = uint64_t(1) << 20;
inline constexpr int kStagingPieces = 16;

}  // namespace troupe
