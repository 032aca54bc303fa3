#pragma once
// Stripes: large frames carried over several TCP connections per peer at once, each written and
// read by a thread of its own. One TCP stream moves bytes at one core's copy rate (~2.2 GB/s over
// loopback on the 2-core machine we measure on); two streams on two cores move ~4 GB/s. Frames from
// TransportOptions::stripe_min bytes up take this path; their bytes land straight in the memory the
// received tensors will use.
//
//   StripeSenders out(/*stripes=*/2, on_broken);             // its threads start here
//   out.connect(/*peer=*/1, peer_direct_endpoint, /*self=*/0, keys, deadline);
//   out.send(1, seq, header_bytes, {payload_bytes}, {}, keep_alive, done);  // never blocks
//   // on the peer, for each connection its DirectListener accepted whose handshake named a stripe:
//   StripeReceivers in(/*self=*/1, /*world_size=*/2, events);
//   in.adopt(fd, /*peer=*/0, /*stripe=*/1);
//   for (StripedFrame& f : in.take_ready()) ...;           // after events.on_ready()
//
// Wire, after the handshake (direct_link.h, handshake.h; lane 1..): chunks, each
// `u64 seq, u64 total, u64 offset, u64 length, u32 header bytes, u32 part count, u64 bytes of each
// part, the header, then length bytes`, little-endian. A frame's parts are laid out one after the
// other, each starting at a multiple of 64 bytes (padding travels as zeros), `total` bytes in all;
// stripe k carries the k-th of `stripes` nearly equal ranges of that layout, and the chunk at offset 0
// also carries the frame header and the part sizes. So a receiver places every chunk at its offset
// in one block without waiting for the others, and the frame is whole when `total` bytes came.
// The per-peer sequence number orders striped frames among the peer's other frames (transport.h).
//
// Like direct links: authenticated by the handshake; in an encrypted job sealed (sealed_stream.h)
// with the connection's session keys: a chunk's head is one record, its bytes records of at most
// kStripeSealedBytes each, opened straight into the frame's block (a record that fails to open
// closes the connection, and the frame is never handed out).
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "devices/event.h"
#include "devices/tensor.h"
#include "net/direct_link.h"
#include "net/job_secret.h"
#include "net/work.h"

namespace troupe::net {

// The most bytes one striped frame may claim (a bigger claim is a malformed chunk, not an allocation).
inline constexpr uint64_t kStripedFrameMax = uint64_t(1) << 36;
// The most plaintext bytes of a chunk one sealed record holds (encrypted jobs): sealed and opened in cache.
inline constexpr size_t kStripeSealedBytes = 256 << 10;

// A part whose bytes come ready over time (a device tensor's copy to host under way,
// devices/host_staging.h): bytes [0, end) of the part are there once the event is done, in order.
// A stripe waits for the event covering the bytes it is about to write, and no longer.
using PartGates = std::vector<std::pair<uint64_t, Event>>;

// The sending side: one thread per stripe, each writing its stripe's chunks to every peer in order.
// SO_SNDBUF and SO_RCVBUF for a stripe connection: half this CPU's L2 cache (the kernel doubles
// it) where both ends have one address (the two ranks share a host), so what one rank's copy puts
// in the socket is still in cache when the other's copy takes it out; 0 (the kernel's autotuning)
// between hosts. remote_bench's 64 MB request on a 2-core AMD EPYC (512 KiB L2), tcp, 12-15 runs
// each, medians: 4.4-4.9 GB/s at 128-256 KiB, 3.7-3.8 at 512 KiB, 2.5 at 4 MiB, 2.8-3.1 autotuned.
int stripe_socket_buffer(int fd);
int same_host_socket_buffer();        // the L2 rule above (256 KiB where the L2 size is unknown)
bool same_address_both_ends(int fd);  // a connected socket's two ends: the same IP address

class StripeSenders {
 public:
  // on_broken(peer) runs on a stripe's thread when a connection to the peer failed (the peer is then
  // suspect; its later frames take the other paths).
  StripeSenders(int stripes, std::function<void(int peer)> on_broken);
  ~StripeSenders();  // drops what is still queued (flush_until first to send it)
  StripeSenders(const StripeSenders&) = delete;
  StripeSenders& operator=(const StripeSenders&) = delete;

  int stripes() const;
  // Opens the stripes' connections to a peer's direct-link endpoint; false when any cannot be made
  // by the deadline (the peer then gets no stripes). encrypt: chunks sealed.
  bool connect(int peer, const std::string& endpoint, int self, const JobKeys& keys, Deadline deadline,
               bool encrypt = false);
  bool usable(int peer) const;  // connected and not broken
  // Queues a frame: its header and parts (bytes that `keep` holds alive until written), and the
  // gates of parts still being copied (one per part, or none). done, if given, finishes when every
  // stripe wrote its range (with CommError when a connection failed, or the error of the device work
  // before a gate: that stripe's connection is then closed, so the peer never takes the bytes).
  void send(int peer, uint64_t seq, std::span<const uint8_t> header, std::span<const std::span<const uint8_t>> parts,
            std::span<const PartGates> gates, std::shared_ptr<const void> keep,
            std::shared_ptr<detail::Completion> done);
  // Waits until every queued chunk is written or the deadline passed.
  void flush_until(Deadline deadline);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// A frame whose chunks all came: its header bytes (frame.h) and its parts as views of one block.
struct StripedFrame {
  int peer = -1;
  std::vector<uint8_t> header;
  std::shared_ptr<Storage> block;
  std::vector<std::pair<uint64_t, uint64_t>> parts;  // offset and bytes of each part in the block
};

// The receiving side: one thread per stripe, reading every peer's connection of that stripe.
class StripeReceivers {
 public:
  struct Events {
    std::function<void()> on_ready;                                    // take_ready() has frames
    std::function<void(int peer)> on_closed;                           // a peer closed a stripe
    std::function<void(int peer, std::exception_ptr error)> on_error;  // a malformed chunk (CommError)
  };
  StripeReceivers(int self, int world_size, Events events, std::chrono::milliseconds stall_timeout);
  ~StripeReceivers();
  StripeReceivers(const StripeReceivers&) = delete;
  StripeReceivers& operator=(const StripeReceivers&) = delete;

  // Takes a connection introduced as stripe `stripe` (1..kMaxStripes) of `peer`; its stripe's thread
  // starts with the stripe's first connection. session: its keys when its chunks are sealed.
  void adopt(int fd, int peer, int stripe, const std::optional<SessionKeys>& session = std::nullopt);
  std::vector<StripedFrame> take_ready();

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace troupe::net
