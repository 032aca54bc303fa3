#include "net/direct_link.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "net/errors.h"
#include "net/wire_bytes.h"

namespace troupe::net {

namespace {

constexpr size_t kHeaderMax = 1024;              // frame headers are ~100 bytes
constexpr size_t kReadChunk = 256 << 10;         // the receive buffer's size while records are small

[[noreturn]] void fail(const std::string& what) { throw CommError("direct link: " + what + ": " + std::strerror(errno)); }

// "host:port" or "[v6 host]:port" -> resolved numeric address (no DNS: peers advertise numbers).
addrinfo* resolve(const std::string& endpoint, bool passive) {
  std::string host = endpoint, port = "0";
  if (!passive) {
    const auto colon = endpoint.rfind(':');
    if (colon == std::string::npos || colon + 1 == endpoint.size())
      throw CommError("direct link: malformed endpoint '" + endpoint + "' (expected host:port)");
    host = endpoint.substr(0, colon);
    port = endpoint.substr(colon + 1);
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0)
    throw CommError("direct link: cannot use address '" + endpoint + "': " + gai_strerror(rc));
  return found;
}

void set_nodelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Reads what the socket holds into buf past its unread bytes [begin, end), first moving those to
// the front when less than a quarter chunk is free behind them. recv's result; end advanced.
ssize_t receive_more(int fd, std::vector<uint8_t>& buf, size_t& begin, size_t& end) {
  if (buf.size() - end < kReadChunk / 4 && begin > 0) {
    std::memmove(buf.data(), buf.data() + begin, end - begin);
    end -= begin;
    begin = 0;
  }
  const ssize_t n = ::recv(fd, buf.data() + end, buf.size() - end, MSG_DONTWAIT);
  if (n > 0) end += static_cast<size_t>(n);
  return n;
}

}  // namespace

SharedFd share_fd(int fd) {
  return SharedFd(new int(fd), [](int* owned) {
    if (*owned >= 0) ::close(*owned);
    delete owned;
  });
}

DirectListener::DirectListener(const std::string& host) {
  addrinfo* found = resolve(host, true);
  fd_ = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) {
    ::freeaddrinfo(found);
    fail("socket");
  }
  const int one = 1;
  ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool bound = ::bind(fd_, found->ai_addr, found->ai_addrlen) == 0 && ::listen(fd_, 128) == 0;
  ::freeaddrinfo(found);
  if (!bound) {
    const int err = errno;
    ::close(fd_);
    errno = err;
    fail("bind " + host);
  }
  sockaddr_storage local{};
  socklen_t size = sizeof local;
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&local), &size);
  const int port = local.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port)
                                               : ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
  const bool v6 = host.find(':') != std::string::npos && host.front() != '[';
  endpoint_ = (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

DirectListener::~DirectListener() {
  if (fd_ >= 0) ::close(fd_);
}

int DirectListener::accept() {
  while (true) {
    const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      set_nodelay(fd);
      return fd;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    return -1;
  }
}

int dial_direct(const std::string& endpoint, int self, int peer, int stripe, const JobKeys& keys, Deadline deadline,
                SessionKeys* sealed) {
  addrinfo* found = resolve(endpoint, false);
  int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    ::freeaddrinfo(found);
    fail("socket");
  }
  const int rc = ::connect(fd, found->ai_addr, found->ai_addrlen);
  ::freeaddrinfo(found);
  auto give_up = [&](const std::string& why) {
    ::close(fd);
    throw CommError("direct link: cannot connect to " + endpoint + ": " + why);
  };
  if (rc != 0 && errno != EINPROGRESS) give_up(std::strerror(errno));
  if (rc != 0) {
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) give_up("timed out");
      pollfd p{fd, POLLOUT, 0};
      const int n = ::poll(&p, 1, static_cast<int>(std::min<long>(left, INT_MAX)));
      if (n > 0) break;
      if (n < 0 && errno != EINTR) give_up(std::strerror(errno));
    }
    int error = 0;
    socklen_t size = sizeof error;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size);
    if (error != 0) give_up(std::strerror(error));
  }
  set_nodelay(fd);
  HelloFields hello;
  hello.path = kDirectPath;
  hello.lane = static_cast<uint32_t>(stripe);
  hello.client_rank = self;
  hello.server_rank = peer;
  hello.flags = sealed ? kHandshakeEncrypt : 0;
  try {
    const SessionKeys session = handshake_as_client(fd, keys, hello, deadline);
    if (sealed) *sealed = session;
  } catch (const CommError& e) {
    give_up(e.what());
  }
  return fd;
}

DirectSender::DirectSender(const std::string& endpoint, int self, int peer, const JobKeys& keys, Deadline deadline,
                           bool encrypt) {
  SessionKeys session;
  owner_ = share_fd(dial_direct(endpoint, self, peer, 0, keys, deadline, encrypt ? &session : nullptr));
  fd_ = *owner_;
  if (encrypt) {
    session_ = session;
    sealer_ = std::make_unique<RecordSealer>(session.send);
  }
}

DirectSender::DirectSender(SharedFd fd, const std::optional<SessionKeys>& session)
    : owner_(std::move(fd)), fd_(*owner_), session_(session) {
  if (session_) sealer_ = std::make_unique<RecordSealer>(session_->send);
}

DirectSender::~DirectSender() = default;

size_t DirectSender::record_bytes(size_t header_bytes, std::span<const std::span<const uint8_t>> parts) {
  size_t bytes = 0;
  for (const auto& p : parts) bytes += p.size();
  return record_bytes(header_bytes, parts.size(), bytes);
}

bool DirectSender::send(std::span<const uint8_t> header, std::span<const std::span<const uint8_t>> parts, bool hold) {
  if (broken_ || header.empty()) return backlogged();
  std::vector<uint8_t> lengths(8 + 8 * parts.size());
  wire::put<uint32_t>(lengths.data(), 0, static_cast<uint32_t>(header.size()));
  wire::put<uint32_t>(lengths.data(), 4, static_cast<uint32_t>(parts.size()));
  for (size_t i = 0; i < parts.size(); ++i) wire::put<uint64_t>(lengths.data(), 8 + 8 * i, parts[i].size());

  std::vector<iovec> iov;
  iov.reserve(parts.size() + 2);
  auto add = [&](const void* data, size_t size) {
    if (size > 0) iov.push_back({const_cast<void*>(data), size});
  };
  add(lengths.data(), lengths.size());
  add(header.data(), header.size());
  for (const auto& p : parts) add(p.data(), p.size());
  if (sealer_) {  // the whole record as one sealed record, in a buffer kept for the next
    std::vector<std::span<const uint8_t>> pieces;
    size_t bytes = 0;
    for (const iovec& v : iov) {
      pieces.emplace_back(static_cast<const uint8_t*>(v.iov_base), v.iov_len);
      bytes += v.iov_len;
    }
    if (bytes <= kSealedRecordMax && sealed_.size() < sealed_record_bytes(bytes))
      sealed_.resize(sealed_record_bytes(bytes));
    size_t sealed = 0;
    try {
      sealed = sealer_->seal_into(pieces, sealed_);
    } catch (const CommError&) {  // the key's records are spent: the link closes, the frames take ZeroMQ
      broken_ = true;
      return backlogged();
    }
    iov.assign(1, iovec{sealed_.data(), sealed});
  }

  size_t written = 0;
  // Behind kept bytes the record must wait its turn; a long gather list is kept whole.
  if (!hold && !backlogged() && iov.size() <= IOV_MAX) {
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = iov.size();
    while (true) {
      const ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0) {
        written = static_cast<size_t>(n);
        break;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        broken_ = true;
        return false;
      }
      break;
    }
  }
  for (const iovec& v : iov) {
    const auto* bytes = static_cast<const uint8_t*>(v.iov_base);
    if (written >= v.iov_len) {
      written -= v.iov_len;
      continue;
    }
    backlog_.insert(backlog_.end(), bytes + written, bytes + v.iov_len);
    written = 0;
  }
  if (kept_ == sent_ && !backlog_.empty()) progress_ = Clock::now();  // the stall, if any, starts here
  kept_ = backlog_.size();
  if (hold) return backlogged();
  return backlogged() ? flush() : false;
}

bool DirectSender::flush() {
  while (!broken_ && backlogged()) {
    const ssize_t n = ::send(fd_, backlog_.data() + sent_, kept_ - sent_, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent_ += static_cast<size_t>(n);
      progress_ = Clock::now();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    broken_ = true;
  }
  backlog_.clear();
  sent_ = kept_ = 0;
  return false;
}

void DirectSender::flush_until(Deadline deadline) {
  while (flush()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return;
    pollfd p{fd_, POLLOUT, 0};
    ::poll(&p, 1, static_cast<int>(std::min<long>(left, INT_MAX)));
  }
}

DirectReceiver::DirectReceiver(int fd, int self, int world_size, const JobKeys& keys, bool encrypt)
    : owner_(share_fd(fd)),
      fd_(fd),
      self_(self),
      world_size_(world_size),
      encrypt_(encrypt),
      handshake_(std::make_unique<HandshakeServer>(keys, self, world_size)),
      buffer_(kHelloBytes + kProofBytes),  // a stranger costs no more than its handshake's bytes
      opened_(Clock::now()) {}

DirectReceiver::DirectReceiver(SharedFd fd, int self, int world_size, int peer,
                               const std::optional<SessionKeys>& session)
    : owner_(std::move(fd)),
      fd_(*owner_),
      self_(self),
      world_size_(world_size),
      encrypt_(session.has_value()),
      session_(session),
      peer_(peer),
      buffer_(kReadChunk),
      opened_(Clock::now()) {
  if (session_) {
    opener_ = std::make_unique<RecordOpener>(session_->receive);
    sealed_.resize(kReadChunk);
  }
}

DirectReceiver::~DirectReceiver() = default;

int DirectReceiver::release() {
  fd_ = -1;
  return std::exchange(*owner_, -1);
}

std::string DirectReceiver::remote() const { return remote_address(fd_); }

std::string remote_address(int fd) {
  sockaddr_storage addr{};
  socklen_t size = sizeof addr;
  char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &size) == 0)
    ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), size, host, sizeof host, port, sizeof port,
                  NI_NUMERICHOST | NI_NUMERICSERV);
  return std::string(host) + ":" + port;
}

// The handshake's server side, a message at a time, each read exactly: a stripe's connection is
// handed on with nothing read past the proof.
bool DirectReceiver::shake_hands() {
  while (peer_ < 0) {
    const bool challenged = end_ >= kHelloBytes;
    const size_t want = challenged ? kHelloBytes + kProofBytes : kHelloBytes;
    const ssize_t n = ::recv(fd_, buffer_.data() + end_, want - end_, MSG_DONTWAIT);
    if (n == 0) throw CommError("direct link: the connection closed during the handshake");
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      fail("handshake");
    }
    end_ += static_cast<size_t>(n);
    if (end_ < want) continue;
    if (!challenged) {
      const auto challenge = handshake_->challenge({buffer_.data(), kHelloBytes});
      // A fresh connection's send buffer takes these few bytes at once.
      if (::send(fd_, challenge.data(), challenge.size(), MSG_NOSIGNAL | MSG_DONTWAIT) != ssize_t(challenge.size()))
        throw CommError("direct link: the handshake's challenge could not be sent");
      continue;
    }
    handshake_->verify({buffer_.data() + kHelloBytes, kProofBytes});
    const HelloFields hello = handshake_->hello();
    const SessionKeys handshake_session = handshake_->session();
    handshake_.reset();
    peer_ = hello.client_rank;  // proven: from here on, what is wrong is that rank's doing
    if (hello.path != kDirectPath || hello.lane > kMaxStripes)
      throw CommError("direct link: rank " + std::to_string(peer_) + " introduced path " + std::to_string(hello.path) +
                      " lane " + std::to_string(hello.lane) + ", at most lane " + std::to_string(kMaxStripes) +
                      " of path " + std::to_string(kDirectPath));
    stripe_ = static_cast<int>(hello.lane);
    begin_ = end_ = 0;
    if (stripe_ == 0) buffer_.resize(kReadChunk);
    if (((hello.flags & kHandshakeEncrypt) != 0) != encrypt_)
      throw CommError("direct link: rank " + std::to_string(peer_) + (encrypt_ ? " does not" : "") +
                      " seal its records and this rank does" + (encrypt_ ? "" : " not") +
                      ": both ranks need the same TROUPE_ENCRYPT");
    if (encrypt_) {
      session_ = handshake_session;
      if (stripe_ == 0) {
        opener_ = std::make_unique<RecordOpener>(session_->receive);
        sealed_.resize(kReadChunk);
      }
    }
  }
  return true;
}

bool DirectReceiver::read(const std::function<void(const DirectRecord&)>& on_record) {
  if (peer_ < 0 && !shake_hands()) return true;
  if (stripe_ > 0) return true;
  if (opener_) return read_sealed(on_record);
  while (true) {
    const ssize_t n = receive_more(fd_, buffer_, begin_, end_);
    if (n > 0) {
      if (!parse(on_record)) return true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    parse(on_record);
    return false;  // closed, or reset: the peer is gone
  }
}

// Makes the buffer hold `bytes` from begin_ on: unread bytes moved to the front, the buffer grown.
// True when it moved or grew (the socket may then hold more than was read).
bool DirectReceiver::make_room(size_t bytes) {
  if (begin_ + bytes <= buffer_.size()) return false;
  std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
  end_ -= begin_;
  begin_ = 0;
  if (bytes > buffer_.size()) buffer_.resize(bytes);
  return true;
}

// Hands out every complete record; false when the buffer ran dry, so the socket is read again
// only when it just filled the buffer (more may be waiting).
bool DirectReceiver::parse(const std::function<void(const DirectRecord&)>& on_record) {
  const bool filled = end_ == buffer_.size();
  DirectRecord record;
  while (end_ - begin_ >= 8) {
    const uint8_t* in = buffer_.data() + begin_;
    const size_t available = end_ - begin_;
    const uint32_t header_bytes = wire::get<uint32_t>(in, 0), part_count = wire::get<uint32_t>(in, 4);
    const std::string from = "from rank " + std::to_string(peer_) + ": ";
    if (header_bytes == 0 || header_bytes > kHeaderMax)
      throw CommError("direct link: a record " + from + "header of " + std::to_string(header_bytes) + " bytes");
    if (part_count > kDirectPartsMax)
      throw CommError("direct link: a record " + from + std::to_string(part_count) + " parts, at most " +
                      std::to_string(kDirectPartsMax));
    const size_t lengths_end = 8 + 8 * size_t(part_count);
    if (available < lengths_end) return make_room(lengths_end) || filled;
    size_t total = lengths_end + header_bytes;
    for (uint32_t i = 0; i < part_count; ++i) {
      const uint64_t size = wire::get<uint64_t>(in, 8 + 8 * i);
      if (size > kDirectRecordMax || total + size > kDirectRecordMax)
        throw CommError("direct link: a record " + from + "longer than " + std::to_string(kDirectRecordMax) +
                        " bytes");
      total += size;
    }
    if (available < total) return make_room(total) || filled;
    record.header = {in + lengths_end, header_bytes};
    record.parts.clear();
    size_t at = lengths_end + header_bytes;
    for (uint32_t i = 0; i < part_count; ++i) {
      const size_t size = wire::get<uint64_t>(in, 8 + 8 * i);
      record.parts.emplace_back(in + at, size);
      at += size;
    }
    begin_ += total;
    partial_since_.reset();
    on_record(record);
  }
  // The progress deadline (net/limits.h) counts from when a record was first seen incomplete.
  if (begin_ == end_) begin_ = end_ = 0;
  else if (!partial_since_) partial_since_ = Clock::now();
  return filled;
}

}  // namespace troupe::net

namespace troupe::net {

// Sealed links: bytes as they come into sealed_, each whole record opened into buffer_ and parsed
// there (a record holds one frame's record, so parse() hands it out at once).
bool DirectReceiver::read_sealed(const std::function<void(const DirectRecord&)>& on_record) {
  while (true) {
    const ssize_t n = receive_more(fd_, sealed_, sealed_begin_, sealed_end_);
    if (n > 0) {
      open_sealed(on_record);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;  // closed, or reset: the peer is gone
  }
}

void DirectReceiver::open_sealed(const std::function<void(const DirectRecord&)>& on_record) {
  while (sealed_end_ - sealed_begin_ >= kSealedLengthBytes) {
    const uint8_t* in = sealed_.data() + sealed_begin_;
    auto from = [&] { return "direct link: a record from rank " + std::to_string(peer_) + " at " + remote() + ": "; };
    uint32_t bytes = 0;
    try {
      bytes = sealed_length(in);
    } catch (const CommError& e) {
      throw CommError(from() + e.what());
    }
    if (bytes > kDirectRecordMax)
      throw CommError(from() + std::to_string(bytes) + " bytes, at most " + std::to_string(kDirectRecordMax));
    const size_t whole = kSealedLengthBytes + bytes + kSealTagBytes;
    if (sealed_end_ - sealed_begin_ < whole) {
      if (sealed_begin_ + whole > sealed_.size()) {
        std::memmove(sealed_.data(), in, sealed_end_ - sealed_begin_);
        sealed_end_ -= sealed_begin_;
        sealed_begin_ = 0;
        if (whole > sealed_.size()) sealed_.resize(whole);
      }
      return;
    }
    if (end_ + bytes > buffer_.size()) {
      std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
      if (end_ + bytes > buffer_.size()) buffer_.resize(end_ + bytes);
    }
    try {
      opener_->open(in, {in + kSealedLengthBytes, bytes + kSealTagBytes}, buffer_.data() + end_);
    } catch (const CommError& e) {
      throw CommError(from() + e.what());
    }
    end_ += bytes;
    sealed_begin_ += whole;
    parse(on_record);
  }
  if (sealed_begin_ == sealed_end_) sealed_begin_ = sealed_end_ = 0;
}

}  // namespace troupe::net
