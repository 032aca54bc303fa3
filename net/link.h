#pragma once
// Link: one path by which this rank's frames reach its peers and theirs reach it (ZeroMQ, the
// direct TCP links, the stripes). A link owns its sockets and threads, its state per peer, its send
// and its receive; the transport (transport.h) numbers the frames, picks a link per frame, and puts
// what the links received back in each peer's order. Gloo's transport::Pair is the model; a link
// covers every peer of its path, as ZeroMQ's ROUTER and the stripes' threads serve all peers at once.
//
//   ZmqLink zmq(context, options, address, sink);   // binds; sink: where received frames go
//   zmq.connect(1, peer_endpoint);
//   // sending thread, holding peer 1's send lock, the frame's seq set:
//   if (!direct.send(frame)) zmq.send(frame);        // the first link that takes it
//   // receiving thread (one at a time), when one of zmq.wait_fds() fired:
//   int frames = zmq.receive();                      // each handed to sink.accept(...)
//
// Internal to net/.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "devices/host_staging.h"
#include "devices/tensor.h"
#include "net/frame.h"
#include "net/work.h"

namespace troupe::net {

// The paths, counted apart per peer (troupe top shows each).
enum Path : uint8_t { zmq_path, direct_path, stripes_path };
inline constexpr int kPaths = 3;

// One frame to send: its header (seq set) and its parts as contiguous host bytes (the payload, or
// an actor frame's call frame and tensors).
struct OutgoingFrame {
  int dst = -1;
  const FrameHeader* header = nullptr;
  std::span<const std::span<const uint8_t>> parts;
  // Each part's HostStaging while a device tensor's copy is still under way (else null), so a link
  // that writes later (the stripes) waits for each piece, not for all.
  std::span<const HostStaging* const> staged;
  // The parts as tensors owning their bytes, for links that write after send() returns. Made only
  // by those: a small frame on a direct link allocates nothing.
  const std::function<std::vector<Tensor>()>* owned = nullptr;
  std::shared_ptr<detail::Completion> done;  // finishes once the bytes are on the wire
  bool awaits_answer = false;  // a request: a direct link may hold it while the peer owes answers
  bool batched = false;        // a SendBatch is open on this thread: a direct link holds it
};

// Where links hand what they received: the transport, which checks, orders and delivers. Links
// call it from the receiving thread, or (suspect, refuse) from a thread of their own.
class FrameSink {
 public:
  // One frame of peer's: its header's bytes and its parts, as u8 tensors owning their bytes.
  virtual bool accept(int peer, Path path, std::span<const uint8_t> header, std::vector<Tensor> parts) = 0;
  // The same for bytes in a buffer the link reuses: each part is copied once. False: refused.
  virtual bool accept(int peer, Path path, std::span<const uint8_t> header,
                      std::span<const std::span<const uint8_t>> parts) = 0;
  virtual void refuse(int peer, const std::exception& why) = 0;  // it sent a bad frame: lost
  virtual void suspect(int peer) = 0;  // a connection to it closed: lost unless its goodbye comes
  virtual void drop() = 0;             // a frame or connection from no rank of this job

 protected:
  ~FrameSink() = default;
};

class Link {
 public:
  virtual ~Link() = default;
  virtual Path path() const = 0;
  // With the destination's send lock held: sends the frame if this link takes it (it reaches the
  // peer and the frame suits it); false: another link must.
  virtual bool send(const OutgoingFrame& frame) = 0;
  // By one thread at a time (the transport's receiving side): hands each frame that came to the
  // sink. How many were taken.
  virtual int receive() = 0;
  // Descriptors that become readable when receive() has something to do.
  virtual void wait_fds(std::vector<int>& fds) const = 0;
};

}  // namespace troupe::net
