#pragma once
// The launchers' rendezvous of an elastic job (`troupe launch --nnodes MIN:MAX --rdzv-endpoint
// HOST:PORT`, like torchrun's c10d rendezvous): the launchers, not the ranks, meet there and agree
// in rounds on which nodes run the job, where each node's ranks begin and rank 0's address. One
// launcher serves it (RoundServer: the one whose host owns HOST, or the first to bind it); every
// launcher, that one too, talks to it as a RoundClient. Internal to net/ (net/bootstrap/launcher.cpp).
//
//   auto server = RoundServer::try_serve("10.0.0.1", 29400, keys, settings, log);  // null: not ours to serve
//   RoundClient client("10.0.0.1", 29400, keys);
//   client.send("join", {"2", "10.0.0.2", "41234", "10.0.0.2/777"});
//   if (auto m = client.receive(50ms); m && m->kind == "round") Round r = parse_round(*m);
//
// Messages (ZeroMQ DEALER to ROUTER; lines of text, the first the kind):
//   launcher -> server  join NPROC HOST PORT NAME  ready for the next round (said again every second)
//                       beat ROUND                 every kBeatEvery; the round it runs, -1 while waiting
//                       exit ROUND CODE WHY        its ranks ended (CODE 0: every one succeeded)
//   server -> launcher  ack                        answers a beat or a join
//                       round ID RUN NODE_RANK NNODES FIRST_RANK WORLD MASTER_HOST MASTER_PORT
//                       stop ROUND WHY             stop your ranks, then join again
//                       end CODE WHY               the job is over (0: every node of the last round succeeded)
// A round closes when MAX nodes wait, or when at least MIN wait, no node of the last round is still
// stopping its ranks and nobody joined for the settle time. A failure (a rank failed, a node silent
// for kBeatTimeout: killed, or its link cut) stops the round and counts against max_restarts; a node
// that joins while a round of fewer than MAX nodes runs stops it too, without counting (the job
// grows). Fewer than MIN nodes for join_timeout: the job ends with an error.
//
// With the job's CURVE keys (job_secret.h: the launchers hold the job secret), the server admits
// only launchers holding them (a ZAP check), as the ranks' ROUTERs do; without (an insecure job),
// anyone reaching HOST:PORT may join.
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "net/job_secret.h"
#include "net/work.h"

namespace troupe::net {

inline constexpr std::chrono::milliseconds kBeatEvery{250};
inline constexpr std::chrono::milliseconds kBeatTimeout{1500};  // a silent node (or server) is gone

struct RoundSettings {
  int min_nodes = 1;
  int max_nodes = 1;
  int max_restarts = 0;                           // failures survived; the next one ends the job
  std::chrono::milliseconds settle{500};          // quiet after the last join before a round closes
  std::chrono::milliseconds join_timeout{30000};  // fewer than min_nodes for this long: the job ends
};

class RoundServer {
 public:
  using Log = std::function<void(const std::string&)>;
  // Serves tcp://numeric_host:port from a thread of its own, or returns null when the address is
  // not this host's or is taken (another launcher serves it). CommError on any other failure.
  static std::unique_ptr<RoundServer> try_serve(const std::string& numeric_host, int port,
                                                const std::optional<CurveKeys>& keys, RoundSettings settings, Log log);
  ~RoundServer();  // stops serving; answers already queued are still sent (for up to a second)
  RoundServer(const RoundServer&) = delete;
  RoundServer& operator=(const RoundServer&) = delete;

 private:
  RoundServer(void* context, void* socket, void* zap, std::optional<CurveKeys> keys, RoundSettings settings, Log log);
  void serve();

  void* context_;
  void* socket_;
  void* zap_;  // the ZAP handler, null without keys
  std::optional<CurveKeys> keys_;
  RoundSettings settings_;
  Log log_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct RoundMessage {
  std::string kind;
  std::vector<std::string> fields;
};
std::string format_round_message(const RoundMessage& message);
RoundMessage parse_round_message(const std::string& body);  // CommError when empty

// A "round" message's fields.
struct Round {
  int id = -1;
  std::string run;  // the job's id, the same on every node
  int node_rank = 0, nnodes = 0, first_rank = 0, world = 0;
  std::string master_host;
  int master_port = 0;
};
Round parse_round(const RoundMessage& message);  // CommError when malformed

// What a launcher-side server (RoundServer, QuorumServer) listens with: a ZeroMQ context, its
// ROUTER (the limits a stranger meets, net/limits.h, and with keys CURVE) and, with keys, the ZAP
// handler bound before it. Nullopt when numeric_host:port is not this host's or is taken (another
// launcher serves it); CommError naming `what` on any other failure. The server closes all three.
struct ServerSockets {
  void* context = nullptr;
  void* router = nullptr;
  void* zap = nullptr;
};
std::optional<ServerSockets> open_server_sockets(const std::string& numeric_host, int port,
                                                 const std::optional<CurveKeys>& keys, const std::string& what);
// A message field as an integer; nullopt when it is not one (all of it).
std::optional<int> parse_int_field(const std::string& text);
// Receives one multipart message without waiting; false when none is queued. fd, when given: the
// file descriptor of the connection it came in on.
bool receive_parts(void* socket, std::vector<std::string>& parts, int* fd = nullptr);

// A client of a launcher-side server (RoundServer, QuorumServer): a DEALER holding the job's keys.
// A connection attempt unanswered for kConnectTimeout is made again (ZeroMQ retries 100 ms later),
// so a server must answer a connection within it (a round trip under 500 ms: any data centre).
inline constexpr std::chrono::milliseconds kConnectTimeout{500};
class RoundClient {
 public:
  // watch: ZeroMQ heartbeats on the connection (a server silent for silent_after is dropped) and a
  // monitor of it, for down_since().
  RoundClient(const std::string& numeric_host, int port, const std::optional<CurveKeys>& keys, bool watch = false,
              std::chrono::milliseconds silent_after = std::chrono::seconds(2));
  ~RoundClient();
  RoundClient(const RoundClient&) = delete;
  RoundClient& operator=(const RoundClient&) = delete;

  void send(const std::string& kind, const std::vector<std::string>& fields);  // never blocks
  // The next message within `wait`; nullopt at once when wake_fd (a descriptor, -1: none) turns
  // readable first, or (with watch) the connection's state changes: then see down_since().
  std::optional<RoundMessage> receive(std::chrono::milliseconds wait, int wake_fd = -1);
  Clock::time_point last_heard() const { return last_heard_; }  // from the server; construction at first
  // With watch: since when the connection has been down (construction, until the first handshake),
  // or nullopt while it is up. From the thread that receives.
  std::optional<Clock::time_point> down_since();
  // What is still queued for the server is dropped on destruction, not flushed for up to a second
  // (for a server found lost: its successor must not wait behind it).
  void discard_unsent();

 private:
  void* context_;
  void* socket_;
  void* monitor_ = nullptr;
  Clock::time_point last_heard_;
  std::optional<Clock::time_point> down_since_;
};

}  // namespace troupe::net
