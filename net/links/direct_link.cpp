#include "net/links/direct_link.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <string_view>

#include "devices/error.h"
#include "devices/host_staging.h"
#include "net/errors.h"
#include "net/limits.h"
#include "net/transport.h"

namespace troupe::net {

namespace {
void check_options(const TransportOptions& options) {
  if (options.direct_max + 4096 > kDirectRecordMax)
    throw ValueError("transport: direct_max " + std::to_string(options.direct_max) + " bytes, at most " +
                     std::to_string(kDirectRecordMax - 4096));
  if (options.stripes < 0 || options.stripes > kMaxStripes)
    throw ValueError("transport: " + std::to_string(options.stripes) + " stripes, expected 0.." +
                     std::to_string(kMaxStripes));
}
}  // namespace

DirectLink::DirectLink(const TransportOptions& options, PeerAddress& address, FrameSink& sink, Hooks hooks)
    : rank_(options.rank),
      world_size_(options.world_size),
      max_bytes_(options.direct_max),
      keys_(options.keys.value_or(JobKeys{})),
      encrypt_(options.encrypt),
      sink_(sink),
      hooks_(std::move(hooks)),
      listener_((check_options(options), options.tcp_host)) {
  for (int r = 0; r < world_size_; ++r) {
    peers_.push_back(std::make_unique<Peer>());
    if (r != rank_) peers_.back()->traffic = LinkTraffic(r, direct_path);
  }
  address.direct = listener_.endpoint();
}

DirectLink::~DirectLink() {
  inbound_.clear();
  for (int fd : accepted_) ::close(fd);
}

void DirectLink::connect(int r, const std::string& endpoint, Deadline deadline) {
  if (rank_ >= r) return;  // the higher rank answers on the link the lower one dialed (receive())
  Peer& p = peer(r);
  try {
    p.sender = std::make_unique<DirectSender>(endpoint, rank_, r, keys_, deadline, encrypt_);
  } catch (const CommError& e) {
    // Unreachable by plain TCP (a firewall, say): its frames all take ZeroMQ, which reached it. A
    // failed handshake is worth a line: ZeroMQ's CURVE admitted the same peer.
    if (std::string_view(e.what()).find("handshake") != std::string_view::npos)
      std::cerr << "transport: rank " + std::to_string(rank_) + ": direct link to rank " + std::to_string(r) + " at " +
                       endpoint + ": " + e.what() + "\n";
    return;
  }
  p.linked = true;
  std::lock_guard lock(accepted_mutex_);
  dialed_.push_back({p.sender->shared_fd(), r, p.sender->session()});
}

int DirectLink::links() const {
  int links = 0;
  for (const auto& p : peers_) links += p->linked.load();
  return links;
}

bool DirectLink::send(const OutgoingFrame& frame) {
  Peer& p = peer(frame.dst);
  if (!p.sender || p.sender->broken() || frame.parts() > kDirectPartsMax) return false;
  const FrameHeader& h = *frame.header;
  const size_t header_bytes = header_size(h.shape.size());
  if (DirectSender::record_bytes(header_bytes, frame.parts(), frame.bytes()) > max_bytes_) return false;
  // The parts' bytes as they are; a device or strided tensor staged here, and waited for: this
  // thread writes it now.
  std::vector<HostStaging> staged;
  std::span<const uint8_t> inline_parts[8];
  std::vector<std::span<const uint8_t>> more_parts;
  std::span<std::span<const uint8_t>> parts{inline_parts, frame.parts()};
  if (frame.parts() > std::size(inline_parts)) {
    more_parts.resize(frame.parts());
    parts = more_parts;
  }
  size_t i = 0;
  if (frame.head.data()) parts[i++] = frame.head;
  for (const Tensor& t : frame.tensors) {
    if (!part_needs_staging(t)) {
      parts[i++] = host_bytes(t);
      continue;
    }
    if (staged.empty()) staged.reserve(frame.tensors.size());
    const HostStaging& s = staged.emplace_back(stage_to_host(t));
    s.synchronize("send: a device tensor's bytes to the network");
    parts[i++] = {s.data(), s.bytes()};
  }
  uint8_t header[512];
  encode_header_into(h, header);
  const bool hold = frame.batched || (frame.awaits_answer && holds_for_answers(p));
  const bool backlogged = p.sender->send({header, header_bytes}, parts, hold);
  p.sent_unanswered.fetch_add(1, std::memory_order_relaxed);
  if (p.sender->broken()) p.broken = true;
  if (frame.done) frame.done->finish();
  if (hold && backlogged) {
    if (!p.holds) {
      p.holds = true;
      peers_holding_.fetch_add(1);
    }
    p.backlogged = true;  // no wake-up: write_held() comes first, or else the I/O thread's next turn
    return true;
  }
  stop_holding(p);  // what it held went out with this frame (or waits for the I/O thread)
  if (backlogged && !p.backlogged.exchange(true)) hooks_.wake();  // the I/O thread writes the rest
  return true;
}

// A request waits for company only where it costs no latency that matters: the peer still owes
// answers to several frames (so it is busy with them, and its next answer brings this rank back to
// the transport), the I/O thread turns within a millisecond (a thread leads), and a few KiB at most.
bool DirectLink::holds_for_answers(const Peer& p) const {
  constexpr int kOwed = 4;
  constexpr size_t kMaxHeldBytes = 16 << 10;
  return p.sent_unanswered.load(std::memory_order_relaxed) >= kOwed && p.sender->kept_bytes() < kMaxHeldBytes &&
         hooks_.turns_soon();
}

void DirectLink::stop_holding(Peer& p) {
  if (!p.holds) return;
  p.holds = false;
  peers_holding_.fetch_sub(1);
}

bool DirectLink::flush(int r) {
  Peer& p = peer(r);
  stop_holding(p);
  const bool still = p.sender->flush();
  if (p.sender->broken()) p.broken = true;
  p.backlogged = still;
  return still;
}

bool DirectLink::flush_before_other(int r) {
  const Peer& p = peer(r);
  return p.sender && p.sender->backlogged() && flush(r);
}

std::string DirectLink::stalled(int r, Clock::time_point now) const {
  const Peer& p = peer(r);
  const auto limit = net_limits().send_stall_timeout;
  if (!p.sender || !p.sender->backlogged() || p.broken.load() || now - p.sender->stalled_since() <= limit) return {};
  return "transport: rank " + std::to_string(r) + " at " + peer_address(p.sender->fd()) + " took none of the " +
         std::to_string(p.sender->kept_bytes()) + " bytes kept for it in " + std::to_string(limit.count()) +
         " ms (TROUPE_SEND_STALL_TIMEOUT_MS): it does not read";
}

void DirectLink::flush_until(int r, Deadline deadline) {
  if (peer(r).sender) peer(r).sender->flush_until(deadline);
}

void DirectLink::accept_waiting() {
  std::lock_guard lock(accepted_mutex_);
  const size_t most = static_cast<size_t>(net_limits().max_pending);
  for (int fd = listener_.accept(); fd >= 0; fd = listener_.accept()) {
    if (accepted_.size() >= most) {  // a flood: the oldest silent one goes (a rank's link speaks at once)
      auto silent = std::find_if(accepted_.begin(), accepted_.end(), [](int waiting) {
        pollfd p{waiting, POLLIN, 0};
        return ::poll(&p, 1, 0) == 0;
      });
      if (silent == accepted_.end()) silent = accepted_.begin();
      log_cut_off(peer_address(*silent), "more than " + std::to_string(most) +
                                             " connections waiting on the direct port, the oldest silent one closed");
      ::close(*silent);
      accepted_.erase(silent);
      sink_.drop();
    }
    accepted_.push_back(fd);
  }
}

// A connection that took too long to say who it is, or to finish a record, or one too many
// waiting (pending_after: the strangers that came after it): why it is cut off; empty: it stays.
// A stranger that has spoken (speaking: bytes of its handshake read or waiting) is let wait behind
// twice as many: a flood of silent connections cannot push out a rank's link before its hello is
// read, and one that speaks is judged within a round trip.
std::string DirectLink::overstays(const DirectReceiver& in, bool speaking, size_t pending_after,
                                  Clock::time_point& now) const {
  const NetLimits& limits = net_limits();
  const size_t most = static_cast<size_t>(limits.max_pending) * (speaking ? 2 : 1);
  if (in.peer() < 0 && pending_after >= most)
    return "more than " + std::to_string(most) + " connections waiting on the direct port, the oldest " +
           (speaking ? "closed" : "silent ones closed");
  if (in.peer() >= 0 && !in.partial_since()) return {};
  if (now == Clock::time_point{}) now = Clock::now();
  if (in.peer() < 0 && now - in.opened() > limits.handshake_timeout)
    return "no introduction within " + std::to_string(limits.handshake_timeout.count()) + " ms";
  if (in.peer() >= 0 && now - *in.partial_since() > limits.progress_timeout)
    return "rank " + std::to_string(in.peer()) + "'s record not finished within " +
           std::to_string(limits.progress_timeout.count()) + " ms";
  return {};
}

void DirectLink::wait_fds(std::vector<int>& fds) const {
  for (const auto& in : inbound_) fds.push_back(in->fd());
}

int DirectLink::receive() {
  {
    std::lock_guard lock(accepted_mutex_);
    for (int fd : accepted_) inbound_.push_back(std::make_unique<DirectReceiver>(fd, rank_, world_size_, keys_, encrypt_));
    accepted_.clear();
    for (auto& d : dialed_)
      inbound_.push_back(std::make_unique<DirectReceiver>(std::move(d.fd), rank_, world_size_, d.peer, d.session));
    dialed_.clear();
  }
  int handled = 0;
  size_t pending = 0;  // strangers (no introduction yet) not looked at yet
  for (const auto& in : inbound_) pending += in->peer() < 0;
  // Strangers are read only when their sockets hold something: one poll for all of them, not a
  // recv each on every call (a flood's 64 pending connections made each of the job's own round
  // trips ~8x slower, scripts/hostile_flood_bench.sh).
  std::vector<pollfd> strangers;
  if (pending > 0) {
    strangers.reserve(pending);
    for (const auto& in : inbound_)
      if (in->peer() < 0) strangers.push_back({in->fd(), POLLIN, 0});
    if (::poll(strangers.data(), strangers.size(), 0) < 0)
      for (pollfd& p : strangers) p.revents = POLLIN;  // cannot tell: read them all
  }
  size_t stranger = 0;
  Clock::time_point now{};  // read only when a stranger or a half-received record is there
  for (auto it = inbound_.begin(); it != inbound_.end();) {
    DirectReceiver& in = **it;
    const bool quiet_stranger = in.peer() < 0 && strangers[stranger++].revents == 0;
    if (in.peer() < 0) --pending;
    bool open = true, refused = false;
    if (const std::string why = overstays(in, !quiet_stranger || in.spoke(), pending, now); !why.empty()) {
      log_cut_off(peer_address(in.fd()), why);
      if (in.peer() >= 0) sink_.refuse(in.peer(), CommError("direct link: " + why));
      else sink_.drop();
      it = inbound_.erase(it);
      continue;
    }
    if (quiet_stranger) {
      ++it;
      continue;
    }
    try {
      open = in.read([&](const DirectRecord& record) {
        if (refused) return;  // the link closes below: nothing after a bad frame is taken
        // The receive buffer is reused for the next records: each part is copied out once, there.
        if (sink_.accept(in.peer(), direct_path, record.header, std::span<const std::span<const uint8_t>>(record.parts)))
          ++handled;
        else refused = true;
      });
      if (refused) log_cut_off(peer_address(in.fd()), "rank " + std::to_string(in.peer()) + " sent a bad frame");
      open = open && !refused;
    } catch (const CommError& e) {  // a failed handshake or a malformed record
      open = false;
      log_cut_off(in.remote(), e.what());
      if (in.peer() >= 0) sink_.refuse(in.peer(), e);
      else sink_.drop();  // a stranger's connection: closed, nothing else
    }
    if (open && in.stripe() == 0 && in.peer() >= 0 && in.peer() < rank_ && !peer(in.peer()).linked.load()) {
      // A lower rank's link: this rank's frames to it go back on the same connection from now on.
      Peer& p = peer(in.peer());
      std::lock_guard lock(hooks_.send_mutex(in.peer()));
      p.sender = std::make_unique<DirectSender>(in.shared_fd(), in.session());
      p.linked = true;
    }
    if (open && in.stripe() > 0) {  // a stripe: its own thread reads it from now on
      try {
        const auto session = in.session();
        hooks_.on_stripe(in.release(), in.peer(), in.stripe(), session);
      } catch (const CommError& e) {
        sink_.refuse(in.peer(), e);
      }
      it = inbound_.erase(it);
      continue;
    }
    if (open) {
      ++it;
      continue;
    }
    // Closed: like ZeroMQ's disconnect, the peer is suspect until its goodbye comes.
    if (in.peer() >= 0) sink_.suspect(in.peer());
    it = inbound_.erase(it);
  }
  return handled;
}

}  // namespace troupe::net
