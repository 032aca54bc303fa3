// The transport's direct links (transport.h, direct_link.h): small frames on one plain TCP
// connection per pair of ranks (the lower one dials), written by the sending thread and read by
// whoever leads. The listener also takes the stripes' connections (transport_stripes.cpp), which
// introduce themselves by lane.
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>

#include "net/errors.h"
#include "net/transport_internal.h"

namespace troupe::net {

void Transport::open_direct_links() {
  if (options_.direct_max + 4096 > kDirectRecordMax)
    throw ValueError("transport: direct_max " + std::to_string(options_.direct_max) + " bytes, at most " +
                     std::to_string(kDirectRecordMax - 4096));
  if (options_.stripes < 0 || options_.stripes > kMaxStripes)
    throw ValueError("transport: " + std::to_string(options_.stripes) + " stripes, expected 0.." +
                     std::to_string(kMaxStripes));
  listener_ = std::make_unique<DirectListener>(options_.tcp_host);
  address_.direct = listener_->endpoint();
  striped_ready_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  StripeReceivers::Events events;
  events.on_ready = [this] {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(striped_ready_fd_, &one, sizeof one);
  };
  events.on_closed = [this](int r) { suspect_peer(r); };
  events.on_error = [this](int r, std::exception_ptr error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      refuse_frame(r, e);
    }
  };
  stripes_in_ =
      std::make_unique<StripeReceivers>(options_.rank, options_.world_size, std::move(events), options_.peer_timeout);
}

void Transport::connect_direct_locked(int r, const PeerAddress& address, Deadline deadline) {
  Peer& peer = *peers_[r];
  if (rank() < r) {  // the lower rank of a pair dials the link; the higher one answers on it (handle_direct)
    try {
      peer.direct = std::make_unique<DirectSender>(address.direct, rank(), deadline);
    } catch (const CommError&) {
      return;  // unreachable by plain TCP (a firewall, say): its frames all take ZeroMQ, which reached it
    }
    peer.linked = true;
    std::lock_guard lock(accepted_mutex_);
    dialed_.emplace_back(peer.direct->shared_fd(), r);
  }
  if (options_.stripes <= 0) return;
  if (!stripes_out_)
    stripes_out_ = std::make_unique<StripeSenders>(options_.stripes, [this](int p) { peers_[p]->direct_broken = true; });
  stripes_out_->connect(r, address.direct, rank(), deadline);  // false: its large frames take ZeroMQ
}

bool Transport::send_direct_locked(Peer& peer, const FrameHeader& h, std::span<const std::span<const uint8_t>> parts,
                                   bool awaits_answer) {
  if (!peer.direct || peer.direct->broken() || parts.size() > kDirectPartsMax) return false;
  const size_t header_bytes = header_size(h.shape.size());
  if (DirectSender::record_bytes(header_bytes, parts) > options_.direct_max) return false;
  uint8_t header[512];
  encode_header_into(h, header);
  bool batched = false;
  for (SendBatch* b = open_send_batch; b && !batched; b = b->outer_) batched = &b->transport_ == this;
  const bool hold = batched || (awaits_answer && holds_for_answers(peer));
  const bool backlogged = peer.direct->send({header, header_bytes}, parts, hold);
  peer.sent_unanswered.fetch_add(1, std::memory_order_relaxed);
  if (peer.direct->broken()) peer.direct_broken = true;
  if (hold && backlogged) {
    if (!peer.holds_sends) {
      peer.holds_sends = true;
      peers_holding_.fetch_add(1);
    }
    peer.direct_backlogged = true;  // no wake-up: write_held() comes first, or else the I/O thread's next turn
    return true;
  }
  stop_holding_locked(peer);  // what it held went out with this frame (or waits for the I/O thread)
  if (backlogged && !peer.direct_backlogged.exchange(true)) wake();  // the I/O thread writes the rest
  return true;
}

// A request waits for company only where it costs no latency that matters: the peer still owes
// answers to several frames (so it is busy with them, and its next answer brings this rank back to
// the transport), the I/O thread turns within a millisecond (a thread leads), and a few KiB at most.
bool Transport::holds_for_answers(const Peer& peer) const {
  constexpr int kOwed = 4;
  constexpr size_t kMaxHeldBytes = 16 << 10;
  return peer.sent_unanswered.load(std::memory_order_relaxed) >= kOwed && peer.direct->kept_bytes() < kMaxHeldBytes &&
         io_turns_soon_.load(std::memory_order_relaxed) &&
         Clock::now() - Clock::time_point(Clock::duration(last_lead_.load(std::memory_order_relaxed))) < kLeadSlice;
}

int Transport::handle_direct() {
  {
    std::lock_guard lock(accepted_mutex_);
    for (int fd : accepted_) inbound_.push_back(std::make_unique<DirectReceiver>(fd, rank(), world_size()));
    accepted_.clear();
    for (auto& [fd, r] : dialed_) inbound_.push_back(std::make_unique<DirectReceiver>(std::move(fd), rank(), world_size(), r));
    dialed_.clear();
  }
  int handled = handle_striped();
  for (auto it = inbound_.begin(); it != inbound_.end();) {
    DirectReceiver& in = **it;
    bool open = true, refused = false;
    try {
      open = in.read([&](const DirectRecord& record) {
        if (refused) return;  // the link closes below: nothing after a bad frame is taken
        // The receive buffer is reused for the next records: each part is copied out once, there.
        if (accept_frame(in.peer(), direct_path, record.header, std::span<const std::span<const uint8_t>>(record.parts)))
          ++handled;
        else refused = true;
      });
      open = open && !refused;
    } catch (const CommError& e) {  // a malformed introduction or record
      open = false;
      if (in.peer() >= 0) refuse_frame(in.peer(), e);
      else ++dropped_frames_;  // a stranger's connection: closed, nothing else
    }
    if (open && in.lane() == 0 && in.peer() >= 0 && in.peer() < rank() && !peers_[in.peer()]->linked.load()) {
      // A lower rank's link: this rank's frames to it go back on the same connection from now on.
      Peer& peer = *peers_[in.peer()];
      std::lock_guard lock(peer.send_mutex);
      peer.direct = std::make_unique<DirectSender>(in.shared_fd());
      peer.linked = true;
    }
    if (open && in.lane() > 0) {  // a stripe: its own thread reads it from now on
      try {
        stripes_in_->adopt(in.release(), in.peer(), in.lane());
      } catch (const CommError& e) {
        refuse_frame(in.peer(), e);
      }
      it = inbound_.erase(it);
      continue;
    }
    if (open) {
      ++it;
      continue;
    }
    // Closed: like ZeroMQ's disconnect, the peer is suspect until its goodbye comes (tick()).
    if (in.peer() >= 0) suspect_peer(in.peer());
    it = inbound_.erase(it);
  }
  return handled;
}

thread_local Transport::SendBatch* open_send_batch = nullptr;

Transport::SendBatch::SendBatch(Transport& transport) : transport_(transport), outer_(open_send_batch) {
  open_send_batch = this;
}

Transport::SendBatch::~SendBatch() {
  open_send_batch = outer_;
  transport_.write_held();
}

void Transport::write_held() {
  if (peers_holding_.load() == 0) return;
  for (auto& p : peers_) {
    std::lock_guard lock(p->send_mutex);
    if (p->holds_sends && flush_direct_locked(*p)) wake();  // the socket is full: the I/O thread writes the rest
  }
}

void Transport::stop_holding_locked(Peer& peer) {
  if (!peer.holds_sends) return;
  peer.holds_sends = false;
  peers_holding_.fetch_sub(1);
}

bool Transport::flush_direct_locked(Peer& peer) {
  stop_holding_locked(peer);
  const bool still = peer.direct->flush();
  if (peer.direct->broken()) peer.direct_broken = true;
  peer.direct_backlogged = still;
  return still;
}

}  // namespace troupe::net
