#include "net/links/stripe_link.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include "devices/host_staging.h"
#include "net/transport.h"

namespace troupe::net {

StripeLink::StripeLink(const TransportOptions& options, FrameSink& sink)
    : rank_(options.rank),
      stripes_(options.stripes),
      min_bytes_(options.stripe_min),
      keys_(options.keys.value_or(JobKeys{})),
      encrypt_(options.encrypt),
      sink_(sink) {
  for (int r = 0; r < options.world_size; ++r) {
    peers_.push_back(std::make_unique<Peer>());
    if (r != rank_) peers_.back()->traffic = LinkTraffic(r, stripes_path);
  }
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
    out_ = std::make_unique<StripeSenders>(stripes_, [this](int p) { peer(p).broken = true; });
  out_->connect(r, endpoint, rank_, keys_, deadline, encrypt_);  // false: its large frames take ZeroMQ
}

bool StripeLink::takes(const OutgoingFrame& frame) const {
  if (!out_ || frame.parts() > kDirectPartsMax || !out_->usable(frame.dst)) return false;
  if (frame.bytes() >= min_bytes_) return true;
  for (const Tensor& t : frame.tensors)
    if (!t.device().is_cpu()) return true;  // its copy to host overlaps the writing here
  return false;
}

bool StripeLink::send(const OutgoingFrame& frame) {
  const FrameHeader& h = *frame.header;
  // What the stripes' threads write, alive until they wrote it: the call frame's bytes (copied,
  // they are small), each host tensor as it is, each other staged here; the threads wait for each
  // piece of a device tensor's copy just before they write it.
  struct Kept {
    std::vector<uint8_t> head;
    std::vector<Tensor> tensors;
  };
  auto kept = std::make_shared<Kept>();
  kept->head.assign(frame.head.begin(), frame.head.end());
  kept->tensors.reserve(frame.tensors.size());
  std::vector<std::span<const uint8_t>> parts;
  std::vector<PartGates> gates(frame.parts());
  parts.reserve(frame.parts());
  if (frame.head.data()) parts.emplace_back(kept->head);
  for (const Tensor& t : frame.tensors) {
    if (part_needs_staging(t)) {
      HostStaging s = stage_to_host(t);
      gates[parts.size()] = std::move(s.pieces);
      kept->tensors.push_back(std::move(s.host));
    } else {
      kept->tensors.push_back(t);
    }
    parts.push_back(host_bytes(kept->tensors.back()));
  }
  uint8_t header[512];
  encode_header_into(h, header);
  out_->send(frame.dst, h.seq, {header, header_size(h.shape.size())}, parts, gates, std::move(kept), frame.done);
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
