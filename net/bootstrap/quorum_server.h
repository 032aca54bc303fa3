#pragma once
// The quorum of an in-place elastic job (`troupe launch --in-place --nnodes MIN:MAX --rdzv-endpoint
// HOST:PORT`): the ranks themselves, not their launchers, meet here, and the job's membership goes
// in epochs. Losing a rank ends its epoch, not the other ranks' processes: the survivors ask for the
// next epoch, which forms as soon as every survivor asked, with the ranks waiting to join; they keep
// their state in memory (net/quorum.h is their side). Served by the launcher whose host owns HOST
// (the first to bind it), on a thread of its own. Internal to net/ (net/bootstrap/launcher.cpp).
//
//   auto server = QuorumServer::try_serve("10.0.0.1", 29400, keys, settings, log);  // null: not ours
//   ...
//   server->wait_finished(30s);  // every member left: the job is over
//
// Messages (ZeroMQ DEALER to ROUTER; lines of text, the first the kind: rendezvous_rounds.h):
//   rank -> server  join NAME               wants to be in the next epoch (a new or restarted rank)
//                   rejoin EPOCH LOST...    a member of EPOCH whose group broke, with the ranks of
//                                           EPOCH it saw lost (or left at a step boundary: none)
//                   address EPOCH ADDRESS   its transport's address in EPOCH
//                   leave                   done: in no epoch again
//   server -> rank  epoch EPOCH RANK WORLD  you are RANK of WORLD in EPOCH: bind, send your address
//                   table EPOCH ADDRESS...  every member's address, by rank: connect and train
//                   lost EPOCH RANK         RANK's connection to this server closed (its process
//                                           ended without leave): it is lost to the group now
//                   reform EPOCH            a rank waits to join, or EPOCH's group broke: leave the
//                                           group at the next step boundary and rejoin
//                   end CODE WHY            the job is over (0: every member left)
// The first epoch forms when max_ranks wait, or min_ranks and nobody joined for the settle time.
// Later ones form when every member of the running epoch that was not lost (or did not leave)
// asked again, or reform_timeout after the first asked; the survivors keep their order and the
// joiners follow. A member that sends no address within reform_timeout is left out and the epoch
// forms again without it. Fewer than min_ranks for join_timeout: the job ends (end 1).
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
  std::chrono::milliseconds reform_timeout{3000};  // a member silent this long is left out
  std::chrono::milliseconds join_timeout{30000};   // fewer than min_ranks this long: the job ends
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
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable finished_cv_;
  std::optional<int> end_code_;
  std::thread thread_;
};

}  // namespace troupe::net
