#pragma once
// Quorum: the process group of an in-place elastic job, as one rank sees it. The job's membership
// goes in epochs (net/bootstrap/quorum_server.h, served by `troupe launch --in-place`); each epoch
// has a ProcessGroup of its own. When a rank is lost, the survivors' processes go on: the group
// breaks (PeerLostError), each survivor asks for the next epoch, and the next group forms from them
// and any rank waiting to join, with the survivors' state still in their memory. When nothing
// changes, a step costs no message to the server: the server pushes "re-form" and "lost" to the
// ranks, and reform_needed() only reads what came.
//
//   net::Quorum quorum;                        // joins ($TROUPE_QUORUM, set by troupe launch --in-place)
//   std::optional<GradientReducer> reducer;
//   while (step < steps) {
//     if (quorum.reform_needed()) {            // a rank joined or was lost: at a step boundary
//       reducer.reset();                       // whatever holds the old group goes first
//       quorum.reform();                       // the next epoch's group
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
// Loss detection: a lost rank's connection to the server closing (a killed process, a killed
// host) is told to every member at once ("lost", which breaks their groups as their own
// heartbeats would); a silent link is found by the transport's heartbeats (TROUPE_PEER_TIMEOUT_MS,
// 3 s by default). Ranks are numbered per epoch: the survivors keep their order, joiners follow.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
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
};

// The job ended (every member left, or it failed) before this rank could take part.
class JobEndedError : public CommError {
 public:
  JobEndedError(int code, const std::string& why)
      : CommError("quorum: the job ended" + (code == 0 ? std::string(" (every rank left)") : ": " + why)), code_(code) {}
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
  int reforms() const { return reforms_; }  // epochs formed after the first

  // Whether the group must re-form before the next step: it broke (lost()), a member's loss was
  // told by the server, or a rank waits to join. Reads only what already came: no message.
  bool reform_needed();
  // The group broke inside a step (PeerLostError, or another CommError of the group).
  void lost(const std::exception& why);
  // Leaves the current epoch's group (its peers see this rank go) and waits for the next epoch's
  // group. JobEndedError / TimeoutError as the constructor.
  void reform();
  // Done: this rank takes part in no epoch again.
  void leave();

 private:
  struct Inbox;
  void listen();                                                  // the listener thread
  void send(const std::string& kind, std::vector<std::string> fields);  // through the listener
  void form();                                                    // waits for the next epoch's group
  void retire(std::shared_ptr<ProcessGroup> group);               // destroyed on a thread of its own
  void shut_down();                                               // leaves, stops the listener, retires all

  QuorumOptions options_;
  std::string host_;  // this rank's address towards the server (its transports bind it)
  std::unique_ptr<Inbox> inbox_;
  std::unique_ptr<RoundClient> client_;
  int wake_[2] = {-1, -1};  // the listener's wake-up pipe
  std::atomic<bool> stop_{false};
  std::thread listener_;

  std::mutex group_mutex_;  // group_ and forming_ against the listener's "lost"
  std::shared_ptr<ProcessGroup> group_;
  std::shared_ptr<Transport> forming_;
  std::atomic<int> epoch_{-1}, forming_epoch_{-1}, reform_asked_{-1};
  bool broken_ = false, left_ = false;
  int reforms_ = -1;
  std::vector<std::thread> retiring_;
};

}  // namespace troupe::net
