#pragma once
// Live recovery: after a quorum's group re-formed (net/quorum.h), every rank behind the newest step
// (one that just joined, or one whose last step did not complete on every rank) takes the state of
// the lowest rank at that step, from that rank's memory, over the group's transport: no file, no
// shared file system. The donor sends each rank behind the model's and the optimizer's tensors as
// they are (one frame each, all at once; large ones go striped, net/stripes.h).
//
// The exchange goes in two halves so that the transfer overlaps the next step, and the ranks with
// the state do not wait for it: a rank behind takes part in that step with no gradient of its own
// (the others cover its rows), then takes the state and applies the step's averaged gradients to it,
// which leaves it where the others are.
//
//   StateShare s = start_state_share(quorum.group(), step, [&] { return capture(step, model, optimizer, state); });
//   const bool behind = s.is_behind(group.rank());   // its rows go to the others; its loss counts 0
//   ... forward, backward, gradients averaged ...
//   s.finish();                                       // the donor's sends done; a rank behind receives
//   if (s.received) restore(*s.received, model, optimizer);   // then optimizer.step() as the others
//
// Every rank of the group calls both halves. share_newest_state() does both at once. It uses the
// group's p2p tag kStateTag (user code should not).
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "models/train/checkpoint.h"
#include "net/process_group.h"
#include "net/work.h"

namespace troupe::models {

inline constexpr int64_t kStateTag = (int64_t{1} << 48) + 0x57a7e;

class StateShare {
 public:
  int64_t newest = -1;                 // the newest step any rank held
  int donor = -1;                      // the rank that sends it; -1 when every rank was at it
  int receivers = 0;                   // ranks that were behind
  std::optional<Checkpoint> received;  // this rank's new state, once finish() returned on a rank behind
  int64_t bytes = 0;                   // bytes this rank sent (the donor) or received
  double seconds = 0;                  // from the start to the end of finish(), as this rank saw it

  bool is_behind(int rank) const;
  // Of the ranks with the state, where `rank` comes and how many there are: a step's rows are split
  // over them (a rank behind gets none). Without ranks behind: rank, size.
  std::pair<int, int> contributor(int rank) const;
  // The donor: until its sends are done. A rank behind: receives the state into `received`.
  // ValueError when the donor sent a malformed state; the group's errors (PeerLostError) as they come.
  void finish();

 private:
  friend StateShare start_state_share(net::ProcessGroup&, int64_t, const std::function<Checkpoint()>&);
  net::ProcessGroup* group_ = nullptr;
  std::vector<int> behind_;
  std::vector<net::Work> sends_;
  double started_ = 0;
};

// `step` is this rank's (-1: none yet, a rank that just joined). capture_mine is called on the
// donor only. Exchanges every rank's step (one all_reduce) and starts the donor's sends.
StateShare start_state_share(net::ProcessGroup& group, int64_t step, const std::function<Checkpoint()>& capture_mine);

// Both halves at once: the ranks with the state wait for the transfer too.
StateShare share_newest_state(net::ProcessGroup& group, int64_t step, const std::function<Checkpoint()>& capture_mine);

}  // namespace troupe::models
