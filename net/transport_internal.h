#pragma once
// The transport's insides, shared by the files it is split into (transport.h says how it works):
// what it keeps per peer and per posted receive, and the limits they share. Internal to net/.
//
//   transport.cpp            lifecycle, sends (choosing the link)
//   transport_io.cpp         the I/O thread
//   transport_receive.cpp    posted receives: matching, waiting, leading the ROUTER
//   frame_accept.cpp         every received frame: decoded, checked, adopted, put in sequence order
//   links/*.cpp              each path's state, per peer too, its send and receive (link.h)
//   transport_liveness.cpp   hello, heartbeats, goodbye, lost peers (state: peer_liveness.h)
//   trace_clock.cpp          TROUPE_TRACE's clock offset to rank 0
#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "net/transport.h"

namespace troupe::net {

inline constexpr int kLingerMs = 2000;
inline constexpr auto kGoodbyeWait = std::chrono::milliseconds(200);
inline constexpr auto kLeadSlice = std::chrono::milliseconds(2);  // then the I/O thread gets a turn
inline constexpr auto kLinkWait = std::chrono::seconds(2);  // for a dialed link after its hello; else ZeroMQ
inline constexpr size_t kMaxActorParts = 1 << 16;  // tensors of one actor frame
inline constexpr size_t kMaxHeldFrames = 1 << 20;  // frames from one peer waiting for one sent before them
inline constexpr size_t kActorBacklogMax = 1 << 12;  // actor frames kept while no RemoteActors takes them

extern thread_local bool telling_handler;  // this thread is telling the actor handler of a lost peer

// This thread's innermost open SendBatch (transport.h), of whichever transport.
extern thread_local Transport::SendBatch* open_send_batch;

// What the transport keeps per peer besides its links' state (their traffic included, link.h) and
// its liveness (peer_liveness.h):
// the send lock and sequence numbers that order its frames over every link.
struct Transport::Peer {
  std::mutex send_mutex;       // a frame's sequence number and its link's send, together
  uint64_t next_seq = 0;       // under send_mutex
  uint64_t expected_seq = 0;   // under router_mutex_
  bool local = false;          // set once by connect(): same host, ipc:// allowed
  // Frames that came before their turn (by sequence number), under router_mutex_.
  std::map<uint64_t, Message> held;
};

struct Transport::Slot {
  Key key;
  int source = -1;
  bool done = false;              // under mutex_
  std::atomic<bool> ready{false};  // mirrors done, for the lock-free checks in wait()
  void finish() {
    done = true;
    ready.store(true, std::memory_order_release);
  }
  std::optional<Message> message;
  std::exception_ptr error;
  std::condition_variable cv;
};

}  // namespace troupe::net
