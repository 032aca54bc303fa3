#pragma once
// Quorum: the process group of an in-place elastic job, as one rank sees it. The job's membership
// goes in epochs (net/bootstrap/quorum_server.h, served by `troupe launch --in-place`); each epoch
// has a ProcessGroup of its own. When a rank is lost or one joins, the server forms the next epoch
// and each rank's builder thread binds and connects its group while the rank trains on; the rank
// changes groups at a step boundary (reform_needed(), reform()), and its old group's peers, seeing
// it go, change too. The survivors' processes go on with their state in memory; the step in flight
// at a loss is redone in the new group. When nothing changes, a step costs no message to the
// server: the server pushes "lost" and the next epoch, and reform_needed() only reads what came.
//
//   net::Quorum quorum;                        // joins ($TROUPE_QUORUM, set by troupe launch --in-place)
//   std::optional<GradientReducer> reducer;
//   while (step < steps) {
//     if (quorum.reform_needed()) {            // a rank joined or was lost: at a step boundary
//       reducer.reset();                       // whatever holds the old group goes first
//       quorum.reform();                       // the next epoch's group (connected meanwhile)
//       ...                                    // the ranks behind take the state: models/train/live_state.h
//     }
//     if (!reducer) reducer.emplace(quorum.group(), params);
//     try {
//       ... forward, backward, reducer->finish() ...
//     } catch (const PeerLostError& e) {
//       quorum.lost(e);                        // the step is redone in the next epoch
//       continue;
//     }
//     optimizer.step(); ++step;
//   }
//   quorum.leave();
//
// No host is special: the server's host lost, the survivors go to a standby served by another
// host's launcher (net/bootstrap/quorum_server.h says which) and the job goes on there.
//
// Loss detection: a lost rank's connection to the server closing (a killed process, a killed
// host) is told to every member at once ("lost", which breaks their groups as their own
// heartbeats would); a silent link is found by the transport's heartbeats (TROUPE_PEER_TIMEOUT_MS,
// 3 s by default). Ranks are numbered per epoch: the survivors keep their order, joiners follow.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "net/errors.h"
#include "net/process_group.h"

namespace troupe::net {

class Transport;
class RoundClient;

struct QuorumOptions {
  std::string endpoint;  // HOST:PORT of the quorum server; empty: $TROUPE_QUORUM
  std::string name;      // how the server's log names this rank; empty: HOST/PID
  // Each epoch group's operation timeout, and the longest wait for an epoch to form.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  // The server unreachable this long while this rank waits for an epoch, with no standby to go
  // to: CommError naming it. A silent connection counts as down after 2 s, or after
  // TROUPE_PEER_TIMEOUT_MS where that is shorter.
  std::chrono::milliseconds server_timeout = std::chrono::seconds(30);
  // Run by the builder thread on each epoch's group once it is connected, before the rank changes
  // to it: collectives of the shapes the rank's steps use (models::GradientReducer::warm_up), so
  // that their first-call set-up is paid while the rank trains on, not in its first step on the new
  // group. It must not touch what the rank's thread changes. Every rank passes the same collectives.
  std::function<void(ProcessGroup&)> warm_up;
};

// The job ended (every member left, or it failed) before this rank could take part.
class JobEndedError : public CommError {
 public:
  JobEndedError(int code, const std::string& why)
      : CommError("quorum: the job ended" + (code == 0 ? std::string(" (its ranks are done)") : ": " + why)), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

class Quorum {
 public:
  static bool configured();  // $TROUPE_QUORUM is set

  // Joins and waits for the first epoch this rank is in. JobEndedError when the job is over;
  // TimeoutError when no epoch formed within options.timeout.
  explicit Quorum(QuorumOptions options = {});
  // Without leave() first (an exception on its way out), the others see this rank lost, not done.
  ~Quorum();
  Quorum(const Quorum&) = delete;
  Quorum& operator=(const Quorum&) = delete;

  ProcessGroup& group() { return *group_; }
  const std::shared_ptr<ProcessGroup>& shared_group() const { return group_; }
  int epoch() const { return epoch_; }

  // Whether to change groups before the next step: this one broke (lost()), or the next epoch's
  // group is connected (it formed in the background: a rank joined, or one was lost). Reads only
  // what already came: no message, no wait.
  bool reform_needed();
  // The group broke inside a step (PeerLostError, or another CommError of the group).
  void lost(const std::exception& why);
  // Leaves the current epoch's group (its peers see this rank go, and change groups too) for the
  // next epoch's, waiting for it when it is not connected yet. JobEndedError / TimeoutError as
  // the constructor.
  void reform();
  // Done: this rank takes part in no epoch again.
  void leave();

 private:
  struct Shared;
  void listen();  // the listener thread: the server's messages; sends what the rank queued
  void build();   // the builder thread: binds and connects each epoch's group as the server forms it
  void send(const std::string& kind, std::vector<std::string> fields);  // through the listener
  std::vector<std::string> join_fields() const;
  std::string launcher_ranks() const;
  void wait_for_next();  // until a group of a later epoch than epoch_ is connected: it becomes group_
  void retire(std::shared_ptr<void> holder);  // destroyed on a thread of its own
  void abort_building(const std::string& why);  // with shared_->mutex held: its connect gives up
  void shut_down();
  void fail_over();  // the listener: the server is lost, to the standby the rule picks
  void send_unanswered();  // the listener: the join, rejoin or resume that no epoch answered yet
  static constexpr std::chrono::milliseconds kFailoverAfter{100};  // down this long: lost, not a blip
  static constexpr std::chrono::milliseconds kResendAfter{1000};  // unanswered this long: sent again

  QuorumOptions options_;
  std::string host_;  // this rank's address towards the server (its transports bind it)
  std::string standby_;  // this rank's launcher's quorum endpoint ($TROUPE_QUORUM_STANDBY), or empty
  bool server_seen_ = false;            // the listener's: its server has answered (fail over only then)
  bool server_dropped_ = false;         // the listener's: the connection dropped since
  std::set<std::string> lost_servers_;  // the listener's: servers this rank failed over from
  std::unique_ptr<Shared> shared_;
  std::unique_ptr<RoundClient> client_;
  int wake_[2] = {-1, -1};  // the listener's wake-up pipe
  std::atomic<bool> stop_{false};
  std::thread listener_, builder_;

  std::shared_ptr<ProcessGroup> group_;  // the rank's thread's; epoch_'s
  std::atomic<int> epoch_{-1};
  bool broken_ = false, left_ = false;
  std::vector<std::thread> retiring_;
};

}  // namespace troupe::net
