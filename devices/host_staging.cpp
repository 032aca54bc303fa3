#include "devices/host_staging.h"

#include <algorithm>

#include "devices/backend.h"
#include "devices/lane.h"

namespace troupe {

void HostStaging::wait_until(uint64_t end) const {
  // The pieces are copied in stream order: the first that covers end is the one to wait for.
  for (const auto& [covered, event] : pieces) {
    if (covered < end && &event != &pieces.back().second) continue;
    if (!event.done()) event.state()->wait();
    if (std::exception_ptr error = event.state()->error()) std::rethrow_exception(error);
    return;
  }
}

void HostStaging::synchronize(std::string_view call) const {
  if (!pieces.empty()) pieces.back().second.synchronize(call);
}

HostStaging stage_to_host(const Tensor& t) {
  HostStaging s;
  if (!t.defined() || t.device().is_cpu()) {
    s.host = t.defined() ? t.contiguous() : Tensor();
    return s;
  }
  await_ready(t);  // the copy goes after the lane work that wrote t
  const Tensor contiguous = t.contiguous();
  const uint64_t nbytes = contiguous.nbytes();
  const uint64_t piece = std::max(kStagingPiece, (nbytes + kStagingPieces - 1) / kStagingPieces);
  s.host = backend(t.device().type).to_host_async(contiguous, piece, s.pieces);
  return s;
}

}  // namespace troupe
