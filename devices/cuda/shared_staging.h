#pragma once
// Large device tensors between processes of one host, with no host wait on either side
// (devices/backend.h: DeviceBackend::stage_shared / unstage_shared).
//
// A segment is a POSIX shared-memory file naming where the bytes go: a block of device memory the
// sender exports (CUDA IPC; both processes on one GPU, the usual case), or else pinned host memory
// after the file's header. The sender queues the copy into the segment on its current stream and
// records an interprocess CUDA event after it; then it sends the descriptor (a few hundred bytes)
// by any transport. The receiver queues, on its own stream, a wait on that event and the copy out.
// Through host memory the copy goes in chunks, each with its event, so chunk k comes in while chunk
// k+1 goes out (the two directions use separate copy engines).
//
//   // rank 0                                        // rank 1, same host
//   auto d = cuda::stage_shared(x, "job-0-to-1");    Tensor y = cuda::unstage_shared(d, Device::cuda(0));
//   send_bytes(*d);                                  // y's bytes land in stream order
//
// Segments are reused: the receiver records an interprocess event after its reads and marks the
// generation consumed; the sender's next copy into that segment waits for that event on the device.
// A channel keeps at most kSegmentsPerChannel segments; when all are still unread, stage_shared
// returns nullopt and the caller sends the tensor another way (so a sender never waits for a
// receiver that has not asked yet). The receiver unlinks a segment's name once it has mapped it; the
// sender unlinks the names nobody mapped when it exits. TROUPE_STAGE_IN=host keeps device memory
// out of it (the pinned host path, as between GPUs that cannot map each other's memory).
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "devices/tensor.h"

namespace troupe::cuda {

inline constexpr int kSegmentsPerChannel = 4;
inline constexpr int kMaxStagedChunks = 32;

// Queues t's copy into a segment of `channel` (one sending process to one receiving process);
// returns the descriptor for unstage_shared, or nullopt when every segment of the channel is unread.
// t: contiguous, on a CUDA device. DeviceError when CUDA refuses (no IPC on this system, say).
std::optional<std::vector<uint8_t>> stage_shared(const Tensor& t, const std::string& channel);
// The staged tensor on `device` (queued on the current stream; a CPU device waits for the chunks on
// the host, counted as a sync). ValueError for a malformed or stale descriptor.
Tensor unstage_shared(std::span<const uint8_t> descriptor, Device device);

}  // namespace troupe::cuda
