#include "net/trace_clock.h"

#include "actors/observe/profiler.h"
#include "devices/error.h"
#include "net/transport.h"

namespace troupe::net {

void sync_trace_clock(Transport& transport, Deadline deadline) {
  const int rank = transport.rank();
  // Each rank in turn pings rank 0; rank 0 answers with its clock. The round trip that took
  // least bounds the offset's error by half of it: the answer was stamped somewhere inside it.
  constexpr uint64_t kClockGroup = 0x7472616365636c6bULL;  // "traceclk": no process group's id
  // At least kRounds tries at a round trip the scheduler did not stretch; more, up to kMaxRounds,
  // while the best one still bounds the error above kWantedBoundNs. Each ping says whether another
  // follows, so rank 0 answers exactly as many.
  constexpr int kRounds = 200, kMaxRounds = 2000;
  constexpr int64_t kWantedBoundNs = 25'000;
  auto now = [] { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); };
  FrameHeader h;
  h.group = kClockGroup;
  if (rank == 0) {
    for (int r = 1; r < transport.world_size(); ++r)
      for (int k = 0;; ++k) {
        std::optional<Message> ping = transport.wait(transport.post(kClockGroup, Inbox::p2p, k, r), deadline);
        if (!ping) throw TimeoutError("TROUPE_TRACE: no clock ping from rank " + std::to_string(r));
        if (ping->payload.numel() == 0) break;  // rank r has its bound
        h.tag = k;
        transport.send(r, h, Tensor::from_vector<int64_t>({now()}, {1}));
      }
    Profiler::set_job_clock(0, 0, 0);
    return;
  }
  int64_t best_rtt = -1, offset = 0;
  for (int k = 0;; ++k) {
    if (k >= kMaxRounds || (k >= kRounds && best_rtt <= 2 * kWantedBoundNs)) {
      h.tag = k;
      transport.send(0, h, Tensor());  // no more pings
      break;
    }
    auto slot = transport.post(kClockGroup, Inbox::p2p, k, 0);
    h.tag = k;
    const int64_t sent = now();
    transport.send(0, h, Tensor::from_vector<int64_t>({1}, {1}));
    std::optional<Message> m = transport.wait(slot, deadline);
    const int64_t back = now();
    if (!m) throw TimeoutError("TROUPE_TRACE: no clock answer from rank 0");
    const int64_t rtt = back - sent;
    if (best_rtt < 0 || rtt < best_rtt) {
      best_rtt = rtt;
      offset = m->payload.to_vector<int64_t>()[0] - (sent + back) / 2;
    }
  }
  Profiler::set_job_clock(rank, offset, (best_rtt + 1) / 2);
}

}  // namespace troupe::net
