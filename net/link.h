#pragma once
// Link: one path by which this rank's frames reach its peers and theirs reach it (ZeroMQ, the
// direct TCP links, the stripes), an object owning what the path shares among peers (sockets,
// threads, listener) and one object per peer (Peer, in each link) holding that peer's end of the
// path: its connection or socket, its state and its traffic. The transport (transport.h) numbers
// the frames, picks a link per frame, and puts what the links received back in each peer's order.
//
// Why per path with peers inside, not Gloo's one object per peer and path: a Gloo tcp::Pair owns
// one socket to one peer and is driven by a Device's shared event loop; only our direct link is
// like that (one connection per pair of ranks: its Peer holds the writing end, and the reading
// ends are read together by whoever holds the receiving side, as Gloo's loop drives its pairs'
// reads). ZeroMQ receives every peer's
// frames on one ROUTER, and a stripe's thread writes and reads that stripe for every peer (one TCP
// stream moves bytes at one core's copy rate: threads per stripe, not per peer), so their receive
// cannot be split by peer without a hand-off per frame; what is a peer's alone (ZeroMQ: its
// DEALER, monitor and traffic; stripes: broken, traffic; direct: its connection, held frames,
// owed answers, traffic) is its Peer object. Sends go through the link with the peer's send lock
// held (the transport's, with the sequence number), receives through the link by whichever
// thread holds the receiving side.
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
#include <memory>
#include <span>
#include <vector>

#include "actors/observe/metrics.h"
#include "devices/host_staging.h"
#include "devices/tensor.h"
#include "net/frame.h"
#include "net/work.h"

namespace troupe::net {

// The paths, counted apart per peer (troupe top shows each).
enum Path : uint8_t { zmq_path, direct_path, stripes_path };
inline constexpr int kPaths = 3;

// One frame to send: its header (seq set) and its parts by reference, as the caller holds them:
// an actor frame's call frame bytes first (head), then the tensors (a p2p payload, or an actor
// frame's arguments or result), each as it is, host or device. Nothing is copied or staged
// before a link takes the frame: the link that writes it reads a contiguous host tensor's own
// bytes, and stages any other (part_needs_staging) where it writes, so a small frame on a direct link
// allocates nothing and a device tensor is copied to host once, by the link that sends it.
struct OutgoingFrame {
  int dst = -1;
  const FrameHeader* header = nullptr;
  std::span<const uint8_t> head;     // an actor frame's call frame (null for other frames)
  std::span<const Tensor> tensors;   // one part each, after head
  std::shared_ptr<detail::Completion> done;  // finishes once the bytes are on the wire
  bool awaits_answer = false;  // a request: a direct link may hold it while the peer owes answers
  bool batched = false;        // a SendBatch is open on this thread: a direct link holds it

  size_t parts() const { return (head.data() ? 1 : 0) + tensors.size(); }
  size_t bytes() const {  // the parts' bytes, the header not counted
    size_t n = head.size();
    for (const Tensor& t : tensors) n += t.nbytes();
    return n;
  }
};

// Whether a link must stage a part before it writes it (devices/host_staging.h): a device tensor
// (copied to pinned host memory in pieces) or a strided host one (made contiguous). A contiguous
// host tensor goes out from its own bytes.
inline bool part_needs_staging(const Tensor& t) { return !t.device().is_cpu() || !t.is_contiguous(); }
// A contiguous host tensor's bytes.
inline std::span<const uint8_t> host_bytes(const Tensor& t) {
  return {static_cast<const uint8_t*>(t.raw_data()), t.nbytes()};
}

// A peer's traffic on one path, both ways (actors/observe/metrics.h): what troupe top shows per peer
// and path. Heartbeats and the other control frames are not counted. Default-made: counts nothing
// (this rank's own entry in a link's table of peers).
class LinkTraffic {
 public:
  LinkTraffic() = default;
  LinkTraffic(int peer, Path path);
  void sent(size_t bytes) {
    sent_bytes_->add(bytes);
    sent_frames_->add();
  }
  void received(size_t bytes) {
    received_bytes_->add(bytes);
    received_frames_->add();
  }

 private:
  metrics::Counter* sent_bytes_ = nullptr;
  metrics::Counter* sent_frames_ = nullptr;
  metrics::Counter* received_bytes_ = nullptr;
  metrics::Counter* received_frames_ = nullptr;
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
  // What this link carried to and from peer r (another rank), kept in r's object.
  virtual LinkTraffic& traffic(int r) = 0;
};

}  // namespace troupe::net
