#pragma once
// Direct links: one plain TCP connection per pair of ranks that carries a transport's small frames
// past ZeroMQ, both ways. A frame sent through ZeroMQ crosses its I/O thread on both sides, and on a
// VM every such cross-core wake-up costs tens of microseconds; a direct link is written by the
// sending thread itself and read by whichever thread waits (transport.h), so a small request
// costs one send() and one recv(). Both ways on one connection, each frame carries the TCP
// acknowledgement of the last one that came: one connection per direction made every recv() send
// a bare ACK through the whole network stack (2 segments per 4-byte exchange instead of 1).
//
//   DirectListener listener("127.0.0.1");            // in the transport's constructor
//   DirectSender to_peer(peer_endpoint, /*self=*/0, /*peer=*/1, keys, deadline_after(5s));
//   to_peer.send(header, {payload});                 // written now, or kept for flush()
//   DirectReceiver from_peer(to_peer.shared_fd(), /*self=*/0, /*world_size=*/2, /*peer=*/1);
//   // on the peer, once listener.accept() gave a connection:
//   DirectReceiver in(fd, /*self=*/1, /*world_size=*/2, keys);
//   in.read([](const DirectRecord& r) { ... });      // the handshake, then records
//   DirectSender back(in.shared_fd());               // answers on the same connection
//
// Wire: the connecting side first proves it holds the job's secret, and learns that the other end
// does (net/handshake.h: hello, challenge, proof); its hello names its rank and its lane: 0 for the
// link of small frames, 1.. for a stripe of large ones, stripes.h, which the transport hands on.
// Nothing is read from a connection before its handshake succeeded. Then records, each
// `u32 header bytes, u32 part count, u64 bytes of each part, the header, the parts`, little-endian.
// A record holds one transport frame: its header (frame.h) and its parts (the payload, then an
// actor frame's tensors). The receiver checks every length before use.
//
// In an encrypted job (TransportOptions::encrypt) each record travels sealed (sealed_stream.h)
// with the connection's session keys, one per direction; the hello says so (kHandshakeEncrypt),
// and a receiver refuses a peer that does not agree. Otherwise nothing is added per record.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "net/handshake.h"
#include "net/job_secret.h"
#include "net/sealed_stream.h"
#include "net/work.h"

namespace troupe::net {

// The largest record a receiver accepts (header, lengths and parts together).
inline constexpr size_t kDirectRecordMax = 1 << 20;
// The most parts one record may have (an actor frame's call frame and tensors).
inline constexpr size_t kDirectPartsMax = 1 << 12;
// The most stripes (connections for large frames, stripes.h) one peer may open besides its link.
inline constexpr int kMaxStripes = 8;

// A connection's descriptor shared by the sender and the receiver of one link: closed with the last.
using SharedFd = std::shared_ptr<int>;
SharedFd share_fd(int fd);  // takes ownership of fd

// A connected socket's other end, "host:port", for messages ("?:?" when unknown).
std::string remote_address(int fd);

// Connects to rank `peer`'s endpoint ("host:port") and runs the handshake's client side as rank
// `self`, lane `stripe`. Returns the connected non-blocking descriptor (the caller owns it).
// CommError when the peer cannot be reached by the deadline or fails the handshake.
// sealed: the connection's records are sealed (an encrypted job): the hello says so, and the
// handshake's session keys land there.
int dial_direct(const std::string& endpoint, int self, int peer, int stripe, const JobKeys& keys, Deadline deadline,
                SessionKeys* sealed = nullptr);

// Listens on host:<any port> for peers' direct links.
class DirectListener {
 public:
  explicit DirectListener(const std::string& host);  // CommError when it cannot bind
  ~DirectListener();
  DirectListener(const DirectListener&) = delete;
  DirectListener& operator=(const DirectListener&) = delete;

  int fd() const { return fd_; }
  const std::string& endpoint() const { return endpoint_; }  // "host:port", what peers connect to
  // A waiting connection (non-blocking descriptor, owned by the caller), or -1 when none waits.
  int accept();

 private:
  int fd_ = -1;
  std::string endpoint_;
};

// The sending end of a direct link to one peer. Not thread-safe: one sender at a time (the
// transport holds the peer's send mutex).
class DirectSender {
 public:
  // Connects to rank `peer`'s endpoint ("host:port") as rank `self` (dial_direct). CommError when
  // the peer cannot be reached by the deadline or fails the handshake. encrypt: records sealed.
  DirectSender(const std::string& endpoint, int self, int peer, const JobKeys& keys, Deadline deadline,
               bool encrypt = false);
  // Sends on a connection a DirectReceiver reads too (the accepting end of a link); sealed with
  // session's send key when given (the receiver's session()).
  explicit DirectSender(SharedFd fd, const std::optional<SessionKeys>& session = std::nullopt);
  ~DirectSender();
  DirectSender(const DirectSender&) = delete;
  DirectSender& operator=(const DirectSender&) = delete;

  // Bytes a record with this header and these parts takes on the wire.
  static size_t record_bytes(size_t header_bytes, std::span<const std::span<const uint8_t>> parts);
  static size_t record_bytes(size_t header_bytes, size_t parts, size_t part_bytes) {
    return 8 + 8 * parts + header_bytes + part_bytes;
  }
  // Sends one record without blocking: written at once as far as the socket takes it, the rest
  // kept, in order, for flush(). True when something is now kept (the caller polls fd() for
  // writing and calls flush()). A broken link drops the record: the transport's liveness checks
  // report the peer. hold: keep all of it for flush(), so that records sent together go in one write.
  bool send(std::span<const uint8_t> header, std::span<const std::span<const uint8_t>> parts, bool hold = false);
  // Writes what was kept, as far as the socket takes it; true while something is still kept.
  bool flush();
  // Waits until everything kept is written, the link broke, or the deadline passed.
  void flush_until(Deadline deadline);
  bool backlogged() const { return kept_ > sent_; }
  size_t kept_bytes() const { return kept_ - sent_; }
  // Since when the peer took none of the kept bytes (meaningful while backlogged()).
  Clock::time_point stalled_since() const { return progress_; }
  bool broken() const { return broken_; }
  int fd() const { return fd_; }
  const SharedFd& shared_fd() const { return owner_; }  // for the receiver of the same link
  const std::optional<SessionKeys>& session() const { return session_; }  // sealed links: the keys
  uint64_t sealed_records() const { return sealer_ ? sealer_->records() : 0; }

 private:
  SharedFd owner_;
  int fd_ = -1;
  bool broken_ = false;
  std::optional<SessionKeys> session_;
  std::unique_ptr<RecordSealer> sealer_;  // encrypted jobs only
  std::vector<uint8_t> sealed_;           // encrypted jobs: the record being sent, sealed
  std::vector<uint8_t> backlog_;  // bytes not yet written, from sent_ on
  size_t sent_ = 0, kept_ = 0;
  Clock::time_point progress_;    // when bytes were last kept after none were, or last written out
};

// One record as read: views into the receiver's buffer, valid during the callback only.
struct DirectRecord {
  std::span<const uint8_t> header;
  std::vector<std::span<const uint8_t>> parts;
};

// The receiving end of a direct link from one peer. Not thread-safe: one reader at a time (the
// transport's leader or I/O thread).
class DirectReceiver {
 public:
  // An accepted connection (takes ownership of fd): the handshake's server side runs first.
  // encrypt: the peer must say its records are sealed, and they are opened.
  DirectReceiver(int fd, int self, int world_size, const JobKeys& keys, bool encrypt = false);
  // Reads a connection this end dialed to rank `peer` (a DirectSender writes it): no handshake comes.
  // session: the dialer's keys when its records are sealed.
  DirectReceiver(SharedFd fd, int self, int world_size, int peer,
                 const std::optional<SessionKeys>& session = std::nullopt);
  ~DirectReceiver();
  DirectReceiver(const DirectReceiver&) = delete;
  DirectReceiver& operator=(const DirectReceiver&) = delete;

  int fd() const { return fd_; }
  int peer() const { return peer_; }  // the sender's rank, -1 until its handshake succeeded
  Clock::time_point opened() const { return opened_; }  // when it was accepted (or dialed)
  // Since when part of a record waits for the rest; nullopt: none does.
  std::optional<Clock::time_point> partial_since() const { return partial_since_; }
  bool spoke() const { return peer_ >= 0 || end_ > 0; }  // sent bytes of its handshake already
  int stripe() const { return stripe_; }  // 0: small frames; 1..: a stripe, for release() to hand on
  int release();                      // gives up the descriptor (nothing past the handshake read)
  std::string remote() const;         // the other end's address, for messages
  const SharedFd& shared_fd() const { return owner_; }  // for a sender on the same connection
  // Sealed connections: this end's keys (set by the handshake), for the answering sender or a stripe.
  const std::optional<SessionKeys>& session() const { return session_; }
  // Reads what the socket holds without blocking and hands each complete record to on_record.
  // False once the peer closed the link (everything it sent before has been handed out).
  // CommError for a failed handshake or a malformed record, naming what is wrong.
  bool read(const std::function<void(const DirectRecord&)>& on_record);

 private:
  bool shake_hands();  // true once done; false while bytes are missing
  bool parse(const std::function<void(const DirectRecord&)>& on_record);
  bool make_room(size_t bytes);
  bool read_sealed(const std::function<void(const DirectRecord&)>& on_record);
  void open_sealed(const std::function<void(const DirectRecord&)>& on_record);

  SharedFd owner_;
  int fd_ = -1;
  const int self_, world_size_;
  const bool encrypt_ = false;
  std::optional<SessionKeys> session_;
  std::unique_ptr<RecordOpener> opener_;  // sealed links: records open into buffer_
  std::vector<uint8_t> sealed_;           // sealed links: bytes as read, [sealed_begin_, sealed_end_) unopened
  size_t sealed_begin_ = 0, sealed_end_ = 0;
  int peer_ = -1;
  int stripe_ = 0;
  std::unique_ptr<HandshakeServer> handshake_;  // accepted connections, until the handshake is done
  std::vector<uint8_t> buffer_;
  size_t begin_ = 0, end_ = 0;  // unread bytes in buffer_
  std::optional<Clock::time_point> partial_since_;
  Clock::time_point opened_;
};

}  // namespace troupe::net
