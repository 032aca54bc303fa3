#pragma once
// The quorum of an in-place elastic job (`troupe launch --in-place --nnodes MIN:MAX --rdzv-endpoint
// HOST:PORT`): the ranks themselves, not their launchers, meet here, and the job's membership goes
// in epochs. Losing a rank ends no other rank's process: the server forms the next epoch without it
// at once, and each rank's builder thread binds and connects that epoch's group while the rank
// trains on; the ranks change groups at a step boundary with their state in memory (net/quorum.h
// is their side). A rank that joins makes the next epoch form the same way. Served by the launcher
// whose host owns HOST (the first to bind it), on a thread of its own. Internal to net/
// (net/bootstrap/launcher.cpp).
//
//   auto server = QuorumServer::try_serve("10.0.0.1", 29400, keys, settings, log);  // null: not ours
//   ...
//   server->wait_finished(30s);  // every member left: the job is over
//
// Messages (ZeroMQ DEALER to ROUTER; lines of text, the first the kind: rendezvous_rounds.h):
//   rank -> server  join NAME [STANDBY [RANKS]]
//                                           wants to be in the next epoch (a new or restarted rank);
//                                           STANDBY: its launcher's quorum endpoint; RANKS: how
//                                           many ranks that launcher runs
//                   resume EPOCH RANK EXPECTED NAME STANDBY [RANKS]
//                                           to a standby: RANK of EPOCH, whose server was lost;
//                                           EXPECTED survivors come (the epoch forms once they have);
//                                           RANKS as in join
//                   rejoin EPOCH LOST...    the ranks of EPOCH (running or forming) it found lost
//                                           (a silent link the server cannot see); from a rank of
//                                           no current epoch (one cut off meanwhile): a join
//                   address EPOCH ADDRESS   its transport's address in EPOCH
//                   leave                   done: in no epoch again
//   server -> rank  epoch EPOCH RANK WORLD  you are RANK of WORLD in EPOCH: bind, send your address
//                   standbys EPOCH S...     each rank's STANDBY, by rank (before the table)
//                   moved ENDPOINT          a standby took the job over: join there
//   standby -> quorum's endpoint  moved ENDPOINT  (every 250 ms after it took over)
//                   table EPOCH ADDRESS...  every rank's address, by rank: connect; EPOCH now runs
//                   lost EPOCH RANK         RANK's connection to this server closed (its process
//                                           ended without leave): it is lost to the running epoch
//                   end CODE WHY            the job is over (0: every member left)
// The first epoch forms when max_ranks wait, or min_ranks and nobody joined for the settle time.
// The next forms at once when a rank of the running epoch is lost (its connection closed, or a rank
// found it lost), or when a rank waits to join while the world is under max_ranks: the running
// epoch's ranks but the lost, in their order, then the joiners. A joiner's launcher short of ranks
// (a host started again, whose ranks finish loading one by one) is waited for, up to host_wait
// from its first joiner, so that the host joins in one epoch and the others change groups once.
// A rank lost while an epoch forms is left out and the epoch formed again; so is one that sends no
// address within reform_timeout. Fewer than min_ranks: the survivors wait for joiners, and after
// join_timeout the job ends (end 1).
//
// No host is special: every launcher of the job serves one. The one on HOST is the quorum; each
// other is a standby at its own host's address, passed to its ranks (TROUPE_QUORUM_STANDBY) and
// listed to every member with each epoch. When the quorum's server is lost, the survivors go to
// the standby of the lowest rank of their epoch not on the lost server's host (the same rule on
// every rank), which takes over: the next epoch forms there once they are all back, numbered on.
// A launcher started again on HOST serves there again; told by the standby, it sends its ranks on.
// A cut does not split the job: a standby that still reaches the quorum's server takes over only
// for enough survivors to run the job (every one they expect, and min_ranks). A lone one it sends
// back to the quorum's server (it was the one cut off): at once when that server says it runs a
// newer epoch than the survivor's, else after `hold`. It gives back the ranks of a take-over that
// formed nothing once the quorum's server answers again.
//
// With the job's CURVE keys the server admits only processes holding the job secret (a ZAP check),
// as the launchers' rendezvous does.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "net/job_secret.h"

namespace troupe::net {

struct QuorumSettings {
  int min_ranks = 1;
  int max_ranks = 1;
  std::chrono::milliseconds settle{500};           // the first epoch: quiet after the last join
  std::chrono::milliseconds reform_timeout{3000};  // a rank without an address this long is left out
  std::chrono::milliseconds join_timeout{30000};   // fewer than min_ranks this long: the job ends
  std::chrono::milliseconds host_wait{2000};       // a joiner's launcher's other ranks: waited for this long
  // A standby's: the quorum's endpoint (told every 250 ms after a take-over), and its own.
  std::string quorum_endpoint{}, self_endpoint{};
  // A standby's: the quorum's server silent this long is lost to it; a survivor that comes while
  // it still answers is held this long, then sent back to it (the survivor was the one cut off).
  std::chrono::milliseconds hold{2000};
};

class QuorumServer {
 public:
  using Log = std::function<void(const std::string&)>;
  // Serves tcp://numeric_host:port, or returns null when the address is not this host's or is taken.
  static std::unique_ptr<QuorumServer> try_serve(const std::string& numeric_host, int port,
                                                 const std::optional<CurveKeys>& keys, QuorumSettings settings, Log log);
  ~QuorumServer();
  QuorumServer(const QuorumServer&) = delete;
  QuorumServer& operator=(const QuorumServer&) = delete;

  // Waits until the job is over (every member left, or it ended with an error) or `wait` passed;
  // the end's code (0: every member left), or nullopt while it goes on.
  std::optional<int> wait_finished(std::chrono::milliseconds wait);
  // Whether it serves the job: it formed an epoch (the quorum's, or a standby's that took over) and
  // no standby has taken the job over from it since. Its launcher then waits for the job's end. An
  // unused standby does not, nor a server on the quorum's host that a standby's take-over found
  // without a running epoch (started again there, or cut off below min_ranks): it sends its
  // joiners on.
  bool serves_the_job() const { return serves_; }

 private:
  QuorumServer(void* context, void* socket, void* zap, std::optional<CurveKeys> keys, QuorumSettings settings, Log log);
  void serve();
  void finish(int code);

  void* context_;
  void* socket_;
  void* zap_;
  std::optional<CurveKeys> keys_;
  QuorumSettings settings_;
  Log log_;
  std::atomic<bool> stop_{false}, serves_{false};
  std::mutex mutex_;
  std::condition_variable finished_cv_;
  std::optional<int> end_code_;
  std::thread thread_;
};

}  // namespace troupe::net
