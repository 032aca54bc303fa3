// The staged path (transport.h: send_staged): a large device tensor to another process on this
// host goes through pinned shared memory, and only its descriptor crosses the transport.
#include <cstdio>
#include <cstring>

#include "devices/backend.h"
#include "net/errors.h"
#include "net/transport_internal.h"

namespace troupe::net {

bool Transport::send_staged(int dst, FrameHeader h, const Tensor& payload,
                            const std::shared_ptr<detail::Completion>& done) {
  if (!payload.defined() || !payload.device().is_cuda() || payload.nbytes() < kStagedMin) return false;
  if (dst < 0 || dst >= world_size() || dst == rank() || !peers_[dst]->staging.load(std::memory_order_relaxed))
    return false;
  check_healthy();
  check_peer(dst);
  // One channel per sending transport and destination: its segments are reused for that pair only.
  const std::string channel = std::to_string(reinterpret_cast<uintptr_t>(this)) + ">" + std::to_string(dst);
  std::optional<std::vector<uint8_t>> descriptor;
  try {
    descriptor = backend(payload.device().type).stage_shared(payload.contiguous(), channel);
  } catch (const DeviceError& e) {
    peers_[dst]->staging = false;
    std::fprintf(stderr,
                 "troupe: rank %d: staging %s for rank %d in shared memory failed (%s); device tensors to rank %d "
                 "go through host bytes from now on\n",
                 rank(), payload.meta().str().c_str(), dst, e.what(), dst);
    return false;
  }
  if (!descriptor) return false;  // every segment still unread by the receiver: the bytes go by the network
  Tensor bytes = Tensor::empty({static_cast<int64_t>(descriptor->size())}, DType::u8);
  std::memcpy(bytes.mutable_raw_data(), descriptor->data(), descriptor->size());
  h.kind = FrameKind::staged;
  send(dst, h, bytes, done);
  return true;
}

Tensor Transport::unstaged(const Message& m, Device device) {
  const auto* bytes = static_cast<const uint8_t*>(m.payload.raw_data());
  try {
    return backend(DeviceType::cuda).unstage_shared({bytes, static_cast<size_t>(m.payload.nbytes())}, device);
  } catch (const Error& e) {
    throw CommError("recv: rank " + std::to_string(m.source) +
                    " staged a device tensor in shared memory that this rank cannot take: " + e.what());
  }
}

}  // namespace troupe::net
