#include "net/links/stripe_link.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include "net/transport.h"

namespace troupe::net {

StripeLink::StripeLink(const TransportOptions& options, FrameSink& sink)
    : rank_(options.rank),
      stripes_(options.stripes),
      min_bytes_(options.stripe_min),
      keys_(options.keys.value_or(JobKeys{})),
      encrypt_(options.encrypt),
      sink_(sink),
      broken_(new std::atomic<bool>[static_cast<size_t>(options.world_size)]{}) {
  ready_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  StripeReceivers::Events events;
  events.on_ready = [this] {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(ready_fd_, &one, sizeof one);
  };
  events.on_closed = [this](int r) { sink_.suspect(r); };
  events.on_error = [this](int r, std::exception_ptr error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      sink_.refuse(r, e);
    }
  };
  in_ = std::make_unique<StripeReceivers>(options.rank, options.world_size, std::move(events), options.peer_timeout);
}

StripeLink::~StripeLink() {
  out_.reset();
  in_.reset();
  if (ready_fd_ >= 0) ::close(ready_fd_);
}

void StripeLink::connect(int r, const std::string& endpoint, Deadline deadline) {
  if (stripes_ <= 0) return;
  if (!out_)
    out_ = std::make_unique<StripeSenders>(stripes_, [this](int p) { broken_[static_cast<size_t>(p)] = true; });
  out_->connect(r, endpoint, rank_, keys_, deadline, encrypt_);  // false: its large frames take ZeroMQ
}

bool StripeLink::takes(int dst, std::span<const std::span<const uint8_t>> parts, bool copies_pending) const {
  if (!out_ || parts.size() > kDirectPartsMax) return false;
  size_t bytes = 0;
  for (const auto& p : parts) bytes += p.size();
  return (copies_pending || bytes >= min_bytes_) && out_->usable(dst);
}

bool StripeLink::send(const OutgoingFrame& frame) {
  const FrameHeader& h = *frame.header;
  // Each part's pieces: the byte counts, within the part, that its events make ready.
  std::vector<PartGates> gates(frame.parts.size());
  for (size_t i = 0; i < frame.staged.size(); ++i)
    if (frame.staged[i]) gates[i] = frame.staged[i]->pieces;
  auto parts = std::make_shared<std::vector<Tensor>>((*frame.owned)());
  // The same bytes as the spans (owned() only moved them into tensors): the stripes keep parts alive.
  std::vector<std::span<const uint8_t>> kept;
  for (const Tensor& p : *parts) kept.emplace_back(static_cast<const uint8_t*>(p.raw_data()), p.nbytes());
  uint8_t header[512];
  encode_header_into(h, header);
  out_->send(frame.dst, h.seq, {header, header_size(h.shape.size())}, kept, gates, std::move(parts), frame.done);
  return true;
}

int StripeLink::receive() {
  uint64_t signals;
  if (::read(ready_fd_, &signals, sizeof signals) < 0) return 0;  // nothing whole yet
  int handled = 0;
  for (StripedFrame& f : in_->take_ready()) {
    // The parts are views of the block: every part starts 64-byte aligned (stripes.h).
    std::vector<Tensor> parts;
    parts.reserve(f.parts.size());
    for (const auto& [offset, bytes] : f.parts)
      parts.emplace_back(f.block, DType::u8, Shape{static_cast<int64_t>(bytes)}, Strides{1},
                         static_cast<int64_t>(offset));
    handled += sink_.accept(f.peer, stripes_path, f.header, std::move(parts));
  }
  return handled;
}

void StripeLink::flush_until(Deadline deadline) {
  if (out_) out_->flush_until(deadline);
}

}  // namespace troupe::net
