#include "net/links/direct_link.h"

#include <unistd.h>

#include <iostream>
#include <string_view>

#include "devices/error.h"
#include "net/errors.h"
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
  for (int r = 0; r < world_size_; ++r) peers_.push_back(std::make_unique<Peer>());
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
  if (!p.sender || p.sender->broken() || frame.parts.size() > kDirectPartsMax) return false;
  const FrameHeader& h = *frame.header;
  const size_t header_bytes = header_size(h.shape.size());
  if (DirectSender::record_bytes(header_bytes, frame.parts) > max_bytes_) return false;
  uint8_t header[512];
  encode_header_into(h, header);
  const bool hold = frame.batched || (frame.awaits_answer && holds_for_answers(p));
  const bool backlogged = p.sender->send({header, header_bytes}, frame.parts, hold);
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

void DirectLink::flush_until(int r, Deadline deadline) {
  if (peer(r).sender) peer(r).sender->flush_until(deadline);
}

void DirectLink::accept_waiting() {
  std::lock_guard lock(accepted_mutex_);
  for (int fd = listener_.accept(); fd >= 0; fd = listener_.accept()) accepted_.push_back(fd);
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
  for (auto it = inbound_.begin(); it != inbound_.end();) {
    DirectReceiver& in = **it;
    bool open = true, refused = false;
    try {
      open = in.read([&](const DirectRecord& record) {
        if (refused) return;  // the link closes below: nothing after a bad frame is taken
        // The receive buffer is reused for the next records: each part is copied out once, there.
        if (sink_.accept(in.peer(), direct_path, record.header, std::span<const std::span<const uint8_t>>(record.parts)))
          ++handled;
        else refused = true;
      });
      open = open && !refused;
    } catch (const CommError& e) {  // a failed handshake or a malformed record
      open = false;
      if (in.peer() >= 0) {
        sink_.refuse(in.peer(), e);
      } else {  // a stranger's connection: one line, closed, nothing else
        std::cerr << "transport: rank " + std::to_string(rank_) + " refused a connection from " + in.remote() + ": " +
                         e.what() + "\n";
        sink_.drop();
      }
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
