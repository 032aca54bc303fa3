#include "net/stripes.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "devices/threads.h"
#include "net/errors.h"
#include "net/wire_bytes.h"
#include "net/direct_link.h"
#include "net/sealed_stream.h"

namespace troupe::net {

namespace {

constexpr size_t kChunkFixed = 40;        // seq, total, offset, length, header bytes, part count
constexpr size_t kHeaderMax = 1024;       // frame headers are ~100 bytes
constexpr uint64_t kPartAlign = 64;       // each part starts here: views of any dtype need no copy
constexpr size_t kOpenPerPeer = 256;      // frames of one peer partly received at once
// A sealed record of a chunk's bytes as it travels, and with the next record's length field after it.
constexpr size_t kSealedRecordWire = sealed_record_bytes(kStripeSealedBytes);
constexpr size_t kSealedReadAhead = kSealedRecordWire + kSealedLengthBytes;


uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// Where each part starts in a frame's block, and the block's size.
uint64_t lay_out(std::span<const uint64_t> sizes, std::vector<uint64_t>& offsets) {
  offsets.clear();
  uint64_t end = 0;
  for (uint64_t size : sizes) {
    const uint64_t at = align_up(end, kPartAlign);
    offsets.push_back(at);
    end = at + size;
  }
  return end;
}

// Stripe k's range of a frame of `total` bytes split over `stripes` stripes.
std::pair<uint64_t, uint64_t> stripe_range(uint64_t total, int stripes, int k) {
  auto edge = [&](int i) { return i == stripes ? total : std::min(total, align_up(total / stripes * i, 4096)); };
  return {edge(k), edge(k + 1)};
}

}  // namespace

bool same_address_both_ends(int fd) {
  sockaddr_storage here{}, there{};
  socklen_t here_len = sizeof here, there_len = sizeof there;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&here), &here_len) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&there), &there_len) != 0 || here.ss_family != there.ss_family)
    return false;
  if (here.ss_family == AF_INET)
    return reinterpret_cast<sockaddr_in&>(here).sin_addr.s_addr == reinterpret_cast<sockaddr_in&>(there).sin_addr.s_addr;
  if (here.ss_family == AF_INET6)
    return std::memcmp(&reinterpret_cast<sockaddr_in6&>(here).sin6_addr, &reinterpret_cast<sockaddr_in6&>(there).sin6_addr,
                       sizeof(in6_addr)) == 0;
  return false;
}

int same_host_socket_buffer() {
  const long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
  return l2 > 0 ? static_cast<int>(std::min<long>(l2 / 2, 8 << 20)) : 256 << 10;
}

int stripe_socket_buffer(int fd) { return same_address_both_ends(fd) ? same_host_socket_buffer() : 0; }

namespace {

void set_blocking(int fd, std::chrono::milliseconds timeout) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (const int bytes = stripe_socket_buffer(fd); bytes > 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  }
}

// Writes every byte of iov (consumed as it goes); false when the connection failed or stalled.
bool write_all(int fd, std::vector<iovec>& iov) {
  size_t first = 0;
  while (first < iov.size()) {
    msghdr msg{};
    msg.msg_iov = iov.data() + first;
    msg.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    auto left = static_cast<size_t>(n);
    while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (left > 0) {
      iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return true;
}

enum class ReadResult { ok, closed, failed };

ReadResult read_all(int fd, void* out, size_t bytes) {
  auto* p = static_cast<uint8_t*>(out);
  while (bytes > 0) {
    const ssize_t n = ::recv(fd, p, bytes, MSG_WAITALL);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n == 0 ? ReadResult::closed : ReadResult::failed;
  }
  return ReadResult::ok;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Sending

struct StripeSenders::State {
  struct Progress {
    std::atomic<int> stripes_left;
    std::atomic<bool> failed{false};
    std::mutex error_mutex;
    std::exception_ptr error;  // the device's, when a gate failed
    std::shared_ptr<detail::Completion> done;
  };
  // The body's bytes up to frame offset `end` may go once `event` is done.
  struct Gate {
    uint64_t end;
    Event event;
  };
  struct Chunk {
    int peer;
    std::vector<uint8_t> head;  // fixed part, part sizes, frame header
    std::vector<iovec> body;
    uint64_t lo = 0;           // the body's first byte's frame offset
    std::vector<Gate> gates;   // by end, those past lo
    std::shared_ptr<const void> keep;
    std::shared_ptr<Progress> progress;
  };
  struct Stripe {
    std::thread thread;
    std::deque<Chunk> queue;
    bool busy = false;
  };

  std::function<void(int)> on_broken;
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<Stripe> stripes;
  std::map<int, std::vector<int>> fds;  // peer -> one connection per stripe
  std::map<int, std::vector<std::shared_ptr<RecordSealer>>> sealers;  // encrypted jobs: one per connection
  std::map<int, bool> broken;
  bool stopping = false;

  void run(int k);
  bool write_chunk(int fd, Chunk& chunk, RecordSealer* sealer, std::span<uint8_t> staging);
  void finish(Chunk& chunk, bool ok);
};

StripeSenders::StripeSenders(int stripes, std::function<void(int peer)> on_broken)
    : state_(std::make_shared<State>()) {
  if (stripes < 1 || stripes > kMaxStripes)
    throw ValueError("transport: " + std::to_string(stripes) + " stripes, expected 1.." + std::to_string(kMaxStripes));
  state_->on_broken = std::move(on_broken);
  state_->stripes.resize(static_cast<size_t>(stripes));
  for (int k = 0; k < stripes; ++k) state_->stripes[k].thread = std::thread([s = state_.get(), k] { s->run(k); });
}

StripeSenders::~StripeSenders() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
    for (auto& [peer, fds] : state_->fds)
      for (int fd : fds) ::shutdown(fd, SHUT_RDWR);  // a stripe blocked in a write returns now
  }
  state_->changed.notify_all();
  for (auto& stripe : state_->stripes) stripe.thread.join();
  for (auto& [peer, fds] : state_->fds)
    for (int fd : fds) ::close(fd);
}

int StripeSenders::stripes() const { return static_cast<int>(state_->stripes.size()); }

bool StripeSenders::connect(int peer, const std::string& endpoint, int self, const JobKeys& keys, Deadline deadline,
                            bool encrypt) {
  std::vector<int> fds;
  std::vector<std::shared_ptr<RecordSealer>> sealers;
  try {
    for (int k = 0; k < stripes(); ++k) {
      SessionKeys session;
      fds.push_back(dial_direct(endpoint, self, peer, k + 1, keys, deadline, encrypt ? &session : nullptr));
      if (encrypt) sealers.push_back(std::make_shared<RecordSealer>(session.send));
      set_blocking(fds.back(), std::chrono::seconds(10));
    }
  } catch (const CommError&) {
    for (int fd : fds) ::close(fd);
    return false;
  }
  std::lock_guard lock(state_->mutex);
  state_->fds[peer] = std::move(fds);
  state_->sealers[peer] = std::move(sealers);
  state_->broken[peer] = false;
  return true;
}

bool StripeSenders::usable(int peer) const {
  std::lock_guard lock(state_->mutex);
  auto it = state_->broken.find(peer);
  return it != state_->broken.end() && !it->second;
}

void StripeSenders::send(int peer, uint64_t seq, std::span<const uint8_t> header,
                         std::span<const std::span<const uint8_t>> parts, std::span<const PartGates> gates,
                         std::shared_ptr<const void> keep, std::shared_ptr<detail::Completion> done) {
  static const uint8_t zeros[kPartAlign] = {};
  std::vector<uint64_t> sizes, offsets;
  for (const auto& p : parts) sizes.push_back(p.size());
  const uint64_t total = lay_out(sizes, offsets);
  // Every part's gates at their frame offsets, in order (a later part's bytes lie further on).
  std::vector<State::Gate> frame_gates;
  for (size_t i = 0; i < gates.size() && i < parts.size(); ++i)
    for (const auto& [end, event] : gates[i]) frame_gates.push_back({offsets[i] + end, event});
  const int n = stripes();
  auto progress = std::make_shared<State::Progress>();
  progress->stripes_left = n;
  progress->done = std::move(done);

  std::vector<State::Chunk> chunks;
  for (int k = 0; k < n; ++k) {
    const auto [lo, hi] = stripe_range(total, n, k);
    State::Chunk chunk{peer, {}, {}, lo, {}, keep, progress};
    for (const State::Gate& g : frame_gates)
      if (g.end > lo) {
        chunk.gates.push_back(g);
        if (g.end >= hi) break;  // it covers the rest of the range
      }
    const bool described = k == 0;
    chunk.head.resize(kChunkFixed + (described ? 8 * sizes.size() + header.size() : 0));
    uint8_t* h = chunk.head.data();
    wire::put<uint64_t>(h, 0, seq);
    wire::put<uint64_t>(h, 8, total);
    wire::put<uint64_t>(h, 16, lo);
    wire::put<uint64_t>(h, 24, hi - lo);
    wire::put<uint32_t>(h, 32, described ? static_cast<uint32_t>(header.size()) : 0);
    wire::put<uint32_t>(h, 36, described ? static_cast<uint32_t>(sizes.size()) : 0);
    if (described) {
      for (size_t i = 0; i < sizes.size(); ++i) wire::put<uint64_t>(h, kChunkFixed + 8 * i, sizes[i]);
      std::memcpy(h + kChunkFixed + 8 * sizes.size(), header.data(), header.size());
    }
    // The range's bytes: pieces of parts and the zero padding between them.
    uint64_t at = lo;
    for (size_t i = 0; i < parts.size() && at < hi; ++i) {
      const uint64_t begin = offsets[i], end = offsets[i] + sizes[i];
      if (at < begin) {
        const uint64_t pad = std::min(begin, hi) - at;
        chunk.body.push_back({const_cast<uint8_t*>(zeros), pad});
        at += pad;
      }
      if (at >= hi || at >= end) continue;
      const uint64_t take = std::min(end, hi) - at;
      chunk.body.push_back({const_cast<uint8_t*>(parts[i].data() + (at - begin)), take});
      at += take;
    }
    chunks.push_back(std::move(chunk));
  }
  {
    std::lock_guard lock(state_->mutex);
    for (int k = 0; k < n; ++k) state_->stripes[k].queue.push_back(std::move(chunks[k]));
  }
  state_->changed.notify_all();
}

void StripeSenders::flush_until(Deadline deadline) {
  std::unique_lock lock(state_->mutex);
  state_->changed.wait_until(lock, deadline, [&] {
    for (const auto& stripe : state_->stripes)
      if (!stripe.queue.empty() || stripe.busy) return false;
    return true;
  });
}

void StripeSenders::State::run(int k) {
  name_this_thread(("troupe-send" + std::to_string(k)).c_str());
  std::unique_ptr<uint8_t[]> staging;  // encrypted jobs: each record sealed here, then written
  std::unique_lock lock(mutex);
  while (true) {
    changed.wait(lock, [&] { return stopping || !stripes[k].queue.empty(); });
    if (stopping) return;
    Chunk chunk = std::move(stripes[k].queue.front());
    stripes[k].queue.pop_front();
    const bool skip = broken[chunk.peer];
    const int fd = fds[chunk.peer][k];
    RecordSealer* sealer = sealers[chunk.peer].empty() ? nullptr : sealers[chunk.peer][k].get();
    stripes[k].busy = true;
    lock.unlock();
    if (sealer && !staging) staging = std::make_unique_for_overwrite<uint8_t[]>(kSealedRecordWire);
    const bool ok = !skip && write_chunk(fd, chunk, sealer, {staging.get(), sealer ? kSealedRecordWire : 0});
    if (!ok && !skip) {
      ::shutdown(fd, SHUT_RDWR);  // a chunk cut short: the peer must not take what came of it
      on_broken(chunk.peer);
    }
    finish(chunk, ok);
    lock.lock();
    if (!ok) broken[chunk.peer] = true;
    stripes[k].busy = false;
    changed.notify_all();
  }
}

// Takes the first `bytes` bytes of iov[first..] (consumed as it goes) into out.
void take_front(std::vector<iovec>& iov, size_t& first, uint64_t bytes, std::vector<iovec>& out) {
  while (bytes > 0 && first < iov.size()) {
    iovec& v = iov[first];
    const size_t n = std::min<uint64_t>(bytes, v.iov_len);
    out.push_back({v.iov_base, n});
    v.iov_base = static_cast<uint8_t*>(v.iov_base) + n;
    v.iov_len -= n;
    bytes -= n;
    if (v.iov_len == 0) ++first;
  }
}

// Writes iov's bytes (consumed) as sealed records of at most kStripeSealedBytes each, each sealed
// into `staging` (the stripe thread's, sealed_record_bytes(kStripeSealedBytes)) and written while
// it is still in cache.
bool write_sealed(int fd, std::vector<iovec>& iov, RecordSealer& sealer, std::span<uint8_t> staging) {
  std::vector<std::span<const uint8_t>> pieces;
  size_t first = 0;
  while (first < iov.size()) {
    pieces.clear();
    size_t bytes = 0;
    while (first < iov.size() && bytes < kStripeSealedBytes) {
      iovec& v = iov[first];
      const size_t n = std::min(v.iov_len, kStripeSealedBytes - bytes);
      pieces.emplace_back(static_cast<const uint8_t*>(v.iov_base), n);
      v.iov_base = static_cast<uint8_t*>(v.iov_base) + n;
      v.iov_len -= n;
      bytes += n;
      if (v.iov_len == 0) ++first;
    }
    size_t sealed = 0;
    try {
      sealed = sealer.seal_into(pieces, staging);
    } catch (const CommError&) {  // the key's records are spent
      return false;
    }
    std::vector<iovec> out{{staging.data(), sealed}};
    if (!write_all(fd, out)) return false;
  }
  iov.clear();
  return true;
}

// The head, then the body: up to each gate's end once its event is done, so the bytes a device
// still copies go out as soon as they land, and the ones before them meanwhile. Sealed: the head
// one record, the body's bytes others.
bool StripeSenders::State::write_chunk(int fd, Chunk& chunk, RecordSealer* sealer, std::span<uint8_t> staging) {
  auto write = [&](std::vector<iovec>& iov) {
    return sealer ? write_sealed(fd, iov, *sealer, staging) : write_all(fd, iov);
  };
  std::vector<iovec> iov{{chunk.head.data(), chunk.head.size()}};
  if (sealer && !write(iov)) return false;
  size_t first = 0;
  uint64_t at = chunk.lo;
  for (const Gate& g : chunk.gates) {
    g.event.state()->wait();
    if (std::exception_ptr error = g.event.state()->error()) {
      std::lock_guard lock(chunk.progress->error_mutex);
      chunk.progress->error = error;
      return false;
    }
    take_front(chunk.body, first, g.end - at, iov);
    at = g.end;
    if (!write(iov)) return false;
    iov.clear();
  }
  take_front(chunk.body, first, UINT64_MAX, iov);
  return iov.empty() || write(iov);
}

void StripeSenders::State::finish(Chunk& chunk, bool ok) {
  Progress& p = *chunk.progress;
  if (!ok) p.failed = true;
  if (p.stripes_left.fetch_sub(1) == 1 && p.done) {
    std::exception_ptr error;
    if (p.failed) {
      std::lock_guard lock(p.error_mutex);
      error = p.error ? p.error
                      : std::make_exception_ptr(CommError("send: a stripe to rank " + std::to_string(chunk.peer) +
                                                          " failed (connection closed or stalled)"));
    }
    p.done->finish(error);
  }
  chunk.keep.reset();
}

// ---------------------------------------------------------------------------------------------
// Receiving

struct StripeReceivers::State {
  struct Transfer {
    std::shared_ptr<Storage> block;
    uint64_t total = 0, received = 0;
    bool described = false;
    std::vector<uint8_t> header;
    std::vector<std::pair<uint64_t, uint64_t>> parts;
  };
  struct Connection {
    int fd, peer;
    std::shared_ptr<RecordOpener> opener;  // encrypted jobs
  };
  struct Stripe {
    std::thread thread;
    int wake = -1;                       // eventfd: new connections, or stop
    std::vector<Connection> connections;  // the stripe's thread's own
    std::vector<Connection> adopted;      // under mutex, for the stripe's thread to take
  };

  int self, world_size;
  Events events;
  std::chrono::milliseconds stall_timeout;
  std::mutex mutex;
  std::map<std::pair<int, uint64_t>, Transfer> transfers;
  std::vector<size_t> open;  // transfers partly received, by peer
  std::vector<StripedFrame> ready;
  Stripe stripes[kMaxStripes];
  std::atomic<bool> stopping{false};

  void run(Stripe& stripe);
  // Reads one chunk; closed: the peer closed the connection between chunks.
  // staging: the stripe thread's room for a sealed record (kSealedReadAhead bytes).
  ReadResult read_chunk(const Connection& c, uint8_t* staging);
  // Sealed connections: one record whole into a vector (closed: between chunks), or `bytes` of
  // records opened into out.
  ReadResult read_sealed_record(const Connection& c, std::vector<uint8_t>& plain, const std::string& from);
  void read_sealed_into(const Connection& c, uint8_t* out, uint64_t bytes, uint8_t* staging, const std::string& from);
};

StripeReceivers::StripeReceivers(int self, int world_size, Events events, std::chrono::milliseconds stall_timeout)
    : state_(std::make_shared<State>()) {
  state_->self = self;
  state_->world_size = world_size;
  state_->events = std::move(events);
  state_->stall_timeout = stall_timeout;
  state_->open.assign(static_cast<size_t>(world_size), 0);
}

StripeReceivers::~StripeReceivers() {
  state_->stopping = true;
  for (auto& stripe : state_->stripes) {
    if (!stripe.thread.joinable()) continue;
    {
      std::lock_guard lock(state_->mutex);
      for (auto& c : stripe.connections) ::shutdown(c.fd, SHUT_RDWR);  // a read in progress returns now
    }
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(stripe.wake, &one, sizeof one);
    stripe.thread.join();
  }
  for (auto& stripe : state_->stripes) {
    for (auto& c : stripe.connections) ::close(c.fd);
    for (auto& c : stripe.adopted) ::close(c.fd);
    if (stripe.wake >= 0) ::close(stripe.wake);
  }
}

void StripeReceivers::adopt(int fd, int peer, int stripe, const std::optional<SessionKeys>& session) {
  if (stripe < 1 || stripe > kMaxStripes) {
    ::close(fd);
    throw CommError("stripes: rank " + std::to_string(peer) + " opened stripe " + std::to_string(stripe) + ", at most " +
                    std::to_string(kMaxStripes));
  }
  set_blocking(fd, state_->stall_timeout);
  State::Stripe& l = state_->stripes[stripe - 1];
  std::lock_guard lock(state_->mutex);
  l.adopted.push_back({fd, peer, session ? std::make_shared<RecordOpener>(session->receive) : nullptr});
  if (!l.thread.joinable()) {
    l.wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    l.thread = std::thread([s = state_.get(), &l] { s->run(l); });
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(l.wake, &one, sizeof one);
}

std::vector<StripedFrame> StripeReceivers::take_ready() {
  std::lock_guard lock(state_->mutex);
  return std::exchange(state_->ready, {});
}

void StripeReceivers::State::run(Stripe& stripe) {
  name_this_thread("troupe-recv");
  std::unique_ptr<uint8_t[]> staging;  // encrypted jobs: each record read here, then opened
  std::vector<pollfd> fds;
  while (!stopping) {
    {
      std::lock_guard lock(mutex);
      stripe.connections.insert(stripe.connections.end(), stripe.adopted.begin(), stripe.adopted.end());
      stripe.adopted.clear();
    }
    fds.assign(1, pollfd{stripe.wake, POLLIN, 0});
    for (const auto& c : stripe.connections) fds.push_back(pollfd{c.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (fds[0].revents & POLLIN) {
      uint64_t count;
      [[maybe_unused]] ssize_t n = ::read(stripe.wake, &count, sizeof count);
    }
    for (size_t i = 1; i < fds.size() && !stopping; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const Connection c = stripe.connections[i - 1];
      ReadResult result;
      try {
        if (c.opener && !staging) staging = std::make_unique_for_overwrite<uint8_t[]>(kSealedReadAhead);
        result = read_chunk(c, staging.get());
      } catch (const CommError&) {
        events.on_error(c.peer, std::current_exception());
        result = ReadResult::failed;
      }
      if (result == ReadResult::ok) continue;
      if (result == ReadResult::closed) events.on_closed(c.peer);
      std::lock_guard lock(mutex);
      std::erase_if(stripe.connections, [&](const Connection& x) { return x.fd == c.fd; });
      ::close(c.fd);
    }
  }
}

ReadResult StripeReceivers::State::read_chunk(const Connection& c, uint8_t* staging) {
  const std::string from = "stripes: a chunk from rank " + std::to_string(c.peer) + ": ";
  uint8_t fixed[kChunkFixed];
  std::vector<uint8_t> head;  // sealed: fixed part, part sizes and header, opened together
  if (c.opener) {
    if (const ReadResult r = read_sealed_record(c, head, from); r != ReadResult::ok) return r;
    if (head.size() < kChunkFixed) throw CommError(from + "a head of " + std::to_string(head.size()) + " bytes");
    std::memcpy(fixed, head.data(), kChunkFixed);
  } else if (const ReadResult r = read_all(c.fd, fixed, kChunkFixed); r != ReadResult::ok) {
    return r;
  }
  const auto seq = wire::get<uint64_t>(fixed, 0), total = wire::get<uint64_t>(fixed, 8);
  const auto offset = wire::get<uint64_t>(fixed, 16), length = wire::get<uint64_t>(fixed, 24);
  const uint32_t header_bytes = wire::get<uint32_t>(fixed, 32), part_count = wire::get<uint32_t>(fixed, 36);
  if (total == 0 || total > kStripedFrameMax)
    throw CommError(from + "a frame of " + std::to_string(total) + " bytes (at most " +
                    std::to_string(kStripedFrameMax) + ")");
  if (offset > total || length > total - offset)
    throw CommError(from + "bytes " + std::to_string(offset) + "+" + std::to_string(length) + " of a frame of " +
                    std::to_string(total));
  // Stripe 0's chunk describes the frame (it starts at 0; another stripe's may too when stripe 0's is empty).
  const bool described = header_bytes > 0;
  if (described != (part_count > 0) || (described && offset != 0) || header_bytes > kHeaderMax ||
      part_count > kDirectPartsMax)
    throw CommError(from + "at offset " + std::to_string(offset) + " with a header of " + std::to_string(header_bytes) +
                    " bytes and " + std::to_string(part_count) + " parts");
  std::vector<uint8_t> layout(8 * size_t(part_count) + header_bytes);
  if (c.opener) {
    if (head.size() != kChunkFixed + layout.size())
      throw CommError(from + "a head of " + std::to_string(head.size()) + " bytes for " + std::to_string(part_count) +
                      " parts and a header of " + std::to_string(header_bytes));
    std::copy(head.begin() + kChunkFixed, head.end(), layout.begin());
  } else if (!layout.empty() && read_all(c.fd, layout.data(), layout.size()) != ReadResult::ok) {
    throw CommError(from + "cut short");
  }
  std::vector<std::pair<uint64_t, uint64_t>> parts;
  if (described) {
    std::vector<uint64_t> sizes, offsets;
    for (uint32_t i = 0; i < part_count; ++i) {
      sizes.push_back(wire::get<uint64_t>(layout.data(), 8 * i));
      if (sizes.back() > kStripedFrameMax) throw CommError(from + "a part of " + std::to_string(sizes.back()) + " bytes");
    }
    if (lay_out(sizes, offsets) != total)
      throw CommError(from + "parts that do not fill a frame of " + std::to_string(total) + " bytes");
    for (size_t i = 0; i < sizes.size(); ++i) parts.emplace_back(offsets[i], sizes[i]);
  }

  const std::pair key{c.peer, seq};
  std::shared_ptr<Storage> block;
  {
    std::lock_guard lock(mutex);
    auto it = transfers.find(key);
    if (it == transfers.end()) {
      if (open[c.peer] >= kOpenPerPeer)
        throw CommError(from + "more than " + std::to_string(kOpenPerPeer) + " frames open at once");
      Transfer t;
      t.total = total;
      try {
        t.block = std::make_shared<Storage>(total, Device::cpu());  // reused blocks (host_allocator.h)
      } catch (const std::bad_alloc&) {
        throw CommError(from + "no memory for a frame of " + std::to_string(total) + " bytes");
      }
      it = transfers.emplace(key, std::move(t)).first;
      ++open[c.peer];
    }
    Transfer& t = it->second;
    if (t.total != total)
      throw CommError(from + "frame " + std::to_string(seq) + " of " + std::to_string(total) + " bytes, earlier " +
                      std::to_string(t.total));
    if (described) {
      if (t.described) throw CommError(from + "frame " + std::to_string(seq) + " described twice");
      t.described = true;
      t.header.assign(layout.end() - header_bytes, layout.end());
      t.parts = std::move(parts);
    }
    block = t.block;
  }
  // Stripes write disjoint ranges of the block; only the bookkeeping is shared.
  if (c.opener) {
    read_sealed_into(c, static_cast<uint8_t*>(block->data()) + offset, length, staging, from);
  } else if (length > 0 && read_all(c.fd, static_cast<uint8_t*>(block->data()) + offset, length) != ReadResult::ok) {
    throw CommError(from + "cut short");
  }
  bool whole = false;
  {
    std::lock_guard lock(mutex);
    Transfer& t = transfers.at(key);
    t.received += length;
    if (t.received > t.total) throw CommError(from + "more bytes than frame " + std::to_string(seq) + " has");
    if (t.received == t.total && t.described) {
      ready.push_back(StripedFrame{c.peer, std::move(t.header), std::move(t.block), std::move(t.parts)});
      transfers.erase(key);
      --open[c.peer];
      whole = true;
    }
  }
  if (whole) events.on_ready();
  return ReadResult::ok;
}

ReadResult StripeReceivers::State::read_sealed_record(const Connection& c, std::vector<uint8_t>& plain,
                                                     const std::string& from) {
  uint8_t length[kSealedLengthBytes];
  if (const ReadResult r = read_all(c.fd, length, sizeof length); r != ReadResult::ok) return r;
  std::vector<uint8_t> sealed;
  try {
    const uint32_t bytes = sealed_length(length);
    if (bytes > kChunkFixed + 8 * kDirectPartsMax + kHeaderMax)
      throw CommError("a chunk's head of " + std::to_string(bytes) + " bytes");
    sealed.resize(bytes + kSealTagBytes);
    if (read_all(c.fd, sealed.data(), sealed.size()) != ReadResult::ok) throw CommError("cut short");
    plain.resize(bytes);
    c.opener->open(length, sealed, plain.data());
  } catch (const CommError& e) {
    throw CommError(from + "at " + remote_address(c.fd) + ": " + e.what());
  }
  return ReadResult::ok;
}

// Each record's ciphertext and tag come in one read into staging (kSealedReadAhead bytes), with
// the next record's length field when the chunk has more to come, and open from there into out.
void StripeReceivers::State::read_sealed_into(const Connection& c, uint8_t* out, uint64_t bytes, uint8_t* staging,
                                              const std::string& from) {
  try {
    uint8_t length[kSealedLengthBytes];
    if (bytes > 0 && read_all(c.fd, length, sizeof length) != ReadResult::ok) throw CommError("cut short");
    while (bytes > 0) {
      const uint32_t n = sealed_length(length);
      if (n == 0 || n > bytes || n > kStripeSealedBytes)
        throw CommError("a record of " + std::to_string(n) + " bytes where " + std::to_string(bytes) +
                        " are to come, at most " + std::to_string(kStripeSealedBytes) + " a record");
      const size_t sealed = n + kSealTagBytes, next = n < bytes ? kSealedLengthBytes : 0;
      if (read_all(c.fd, staging, sealed + next) != ReadResult::ok) throw CommError("cut short");
      c.opener->open(length, {staging, sealed}, out);
      std::memcpy(length, staging + sealed, next);
      out += n;
      bytes -= n;
    }
  } catch (const CommError& e) {
    throw CommError(from + "at " + remote_address(c.fd) + ": " + e.what());
  }
}

}  // namespace troupe::net
