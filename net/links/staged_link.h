#pragma once
// The staged device link: a large device tensor to another process on this host goes through a
// device block the sender exports (CUDA IPC), or else pinned shared memory in chunks
// (devices/cuda/shared_staging.h), copied out on the sender's stream and in on the receiver's,
// neither host waiting. Only a descriptor travels, as a frame of kind staged on the other links;
// so this link makes and reads descriptors, and the transport sends them (Transport::send_staged).
//
//   StagedLink staged(/*rank=*/0, /*world_size=*/2);
//   staged.enable(1);                                   // rank 1: another process on this host
//   if (std::optional<Tensor> d = staged.describe(1, x)) transport.send(1, staged_header, *d);
//   // on rank 1, for the frame that came:
//   Tensor y = StagedLink::unstage(message, Device::cuda(0));
//
// Internal to net/.
#include <atomic>
#include <memory>
#include <optional>

#include "devices/tensor.h"

namespace troupe::net {

struct Message;

class StagedLink {
 public:
  // Tensors of at least this many bytes are staged; smaller ones go as bytes.
  static constexpr size_t kMinBytes = size_t(1) << 20;

  StagedLink(int rank, int world_size);
  void enable(int r) { usable_[static_cast<size_t>(r)] = true; }  // once connected
  // The descriptor of `payload` staged for rank dst, as u8 bytes to send; nullopt when this link
  // does not apply (a host or small tensor, dst not another process on this host, staging failed
  // once for dst: it stays off, with a note on stderr) or every segment to dst is still unread.
  std::optional<Tensor> describe(int dst, const Tensor& payload);
  // Whether describe() may take it: a device tensor of kMinBytes or more, dst enabled.
  bool applies(int dst, const Tensor& payload) const;
  // The tensor a staged frame's descriptor describes, on `device` (queued on the calling thread's
  // stream for a device). CommError naming the sender when the descriptor cannot be used.
  static Tensor unstage(const Message& m, Device device);

 private:
  const int rank_;
  std::unique_ptr<std::atomic<bool>[]> usable_;  // by rank
};

}  // namespace troupe::net
