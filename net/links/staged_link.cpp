#include "net/links/staged_link.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "devices/backend.h"
#include "net/errors.h"
#include "net/transport.h"

namespace troupe::net {

StagedLink::StagedLink(int rank, int world_size)
    : rank_(rank), usable_(new std::atomic<bool>[static_cast<size_t>(world_size)]{}) {}

bool StagedLink::applies(int dst, const Tensor& payload) const {
  return payload.defined() && payload.device().is_cuda() && payload.nbytes() >= kMinBytes &&
         usable_[static_cast<size_t>(dst)].load(std::memory_order_relaxed);
}

std::optional<Tensor> StagedLink::describe(int dst, const Tensor& payload) {
  if (!applies(dst, payload)) return std::nullopt;
  std::atomic<bool>& usable = usable_[static_cast<size_t>(dst)];
  // One channel per sending link and destination: its segments are reused for that pair only.
  const std::string channel = std::to_string(reinterpret_cast<uintptr_t>(this)) + ">" + std::to_string(dst);
  std::optional<std::vector<uint8_t>> descriptor;
  try {
    descriptor = backend(payload.device().type).stage_shared(payload.contiguous(), channel);
  } catch (const DeviceError& e) {
    usable = false;
    std::fprintf(stderr,
                 "troupe: rank %d: staging %s for rank %d in shared memory failed (%s); device tensors to rank %d "
                 "go through host bytes from now on\n",
                 rank_, payload.meta().str().c_str(), dst, e.what(), dst);
    return std::nullopt;
  }
  if (!descriptor) return std::nullopt;  // every segment still unread by the receiver: the bytes go by the network
  Tensor bytes = Tensor::empty({static_cast<int64_t>(descriptor->size())}, DType::u8);
  std::memcpy(bytes.mutable_raw_data(), descriptor->data(), descriptor->size());
  return bytes;
}

Tensor StagedLink::unstage(const Message& m, Device device) {
  const auto* bytes = static_cast<const uint8_t*>(m.payload.raw_data());
  try {
    return backend(DeviceType::cuda).unstage_shared({bytes, static_cast<size_t>(m.payload.nbytes())}, device);
  } catch (const Error& e) {
    throw CommError("recv: rank " + std::to_string(m.source) +
                    " staged a device tensor in shared memory that this rank cannot take: " + e.what());
  }
}

}  // namespace troupe::net
