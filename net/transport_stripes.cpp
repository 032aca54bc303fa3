// The transport's stripes (transport.h, stripes.h): large frames over several connections per peer
// at once, received straight into blocks whose views become the frame's parts.
#include <unistd.h>

#include "net/transport_internal.h"

namespace troupe::net {

bool Transport::takes_stripes(int dst, std::span<const std::span<const uint8_t>> parts, bool copies_pending) const {
  if (!stripes_out_ || parts.size() > kDirectPartsMax) return false;
  size_t bytes = 0;
  for (const auto& p : parts) bytes += p.size();
  return (copies_pending || bytes >= options_.stripe_min) && stripes_out_->usable(dst);
}

void Transport::send_striped_locked(int dst, const FrameHeader& h, std::span<const std::span<const uint8_t>> parts,
                                    std::vector<PartGates> gates, std::shared_ptr<const void> keep,
                                    const std::shared_ptr<detail::Completion>& done) {
  uint8_t header[512];
  const size_t header_bytes = header_size(h.shape.size());
  encode_header_into(h, header);
  stripes_out_->send(dst, h.seq, {header, header_bytes}, parts, gates, std::move(keep), done);
}

int Transport::handle_striped() {
  if (!stripes_in_) return 0;
  uint64_t signals;
  if (::read(striped_ready_fd_, &signals, sizeof signals) < 0) return 0;  // nothing whole yet
  int handled = 0;
  for (StripedFrame& f : stripes_in_->take_ready()) {
    // The parts are views of the block: every part starts 64-byte aligned (stripes.h).
    std::vector<Tensor> parts;
    parts.reserve(f.parts.size());
    for (const auto& [offset, bytes] : f.parts)
      parts.emplace_back(f.block, DType::u8, Shape{static_cast<int64_t>(bytes)}, Strides{1},
                         static_cast<int64_t>(offset));
    handled += accept_frame(f.peer, stripes_path, f.header, std::move(parts));
  }
  return handled;
}

}  // namespace troupe::net
