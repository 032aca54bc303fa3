#pragma once
// Live recovery: after a quorum's group re-formed (net/quorum.h), every rank behind the newest step
// (one that just joined, or one whose last step did not complete on every rank) takes the state of
// the lowest rank at that step, from that rank's memory, over the group's transport: no file, no
// shared file system. The donor sends each rank behind the model's and the optimizer's tensors as
// they are (one frame each, all at once; large ones go striped, net/stripes.h), so a transfer takes
// about its bytes over the link.
//
//   StateShare s = share_newest_state(quorum.group(), step, [&] { return capture(step, model, optimizer, state); });
//   if (s.received) {
//     restore(*s.received, model, optimizer);   // checked, then copied in place
//     step = s.received->step;
//   }
//
// Every rank of the group calls it. It uses the group's p2p tag kStateTag (user code should not).
#include <cstdint>
#include <functional>
#include <optional>

#include "models/train/checkpoint.h"
#include "net/process_group.h"

namespace troupe::models {

inline constexpr int64_t kStateTag = (int64_t{1} << 48) + 0x57a7e;

struct StateShare {
  int64_t newest = -1;                 // the newest step any rank held
  int donor = -1;                      // the rank that sent it; -1 when every rank was at it
  int receivers = 0;                   // ranks that were behind
  std::optional<Checkpoint> received;  // this rank's new state, when it was behind
  int64_t bytes = 0;                   // bytes this rank sent (the donor) or received
  double seconds = 0;                  // the transfer, as this rank saw it
};

// `step` is this rank's (-1: none yet, a rank that just joined). capture_mine is called on the
// donor only. ValueError when a rank sent a malformed state; the group's errors (PeerLostError) as
// they come.
StateShare share_newest_state(net::ProcessGroup& group, int64_t step, const std::function<Checkpoint()>& capture_mine);

}  // namespace troupe::models
