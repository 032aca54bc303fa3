#pragma once
// Transport: one rank's ZeroMQ endpoint. Frames to a rank go out on a DEALER connected to that
// rank; every frame to this rank arrives on one ROUTER (bound to tcp:// and ipc://), whose I/O
// thread files it into per-(group, inbox, tag) queues that receivers wait on.
//
//   Transport t({.rank = 0, .world_size = 2});
//   std::vector<PeerAddress> table = /* everyone's t.address(), from a rendezvous */;
//   t.connect(table, deadline_after(10s));
//   t.send(1, header, tensor);                                   // never blocks; zero-copy
//   auto slot = t.post(/*group=*/0, Inbox::p2p, /*tag=*/0, /*source=*/1);
//   std::optional<Message> m = t.wait(slot, deadline_after(1s));  // nullopt: timed out
//
// Why a thread and not a CAF actor per rank: the rank *is* an actor in the model's sense (one
// mailbox, messages handled one at a time, in order), but it must answer heartbeats while every
// CAF worker runs kernels, and a hop through the CAF scheduler would add microseconds to every
// message. So the rank's mailbox is its ROUTER, drained by whoever holds it: a thread waiting for
// a message (it "leads" and is woken by ZeroMQ directly: no extra hand-off on the hot path), or,
// when nobody waits, the transport's I/O thread. Followers sleep on their inbox with a deadline.
//
// Design choices:
// - Each path is a Link (link.h; net/links/: ZeroMQ, direct, stripes, and the staged device
//   descriptors) owning its sockets, threads, per-peer state, send and receive. The transport
//   numbers each peer's frames, gives each frame to the first link that takes it, puts what the
//   links received back in sequence order (frame_accept.cpp) and matches it to posted receives;
//   peer_liveness.h keeps who is alive.
// - Sends go straight from the caller's thread onto the peer's DEALER under a per-peer mutex
//   (ZeroMQ sockets may change threads behind a full memory barrier): no hand-off, lower latency.
// - Receives are matched in posting order, MPI style: an arriving frame completes the oldest
//   posted receive that accepts it, or waits in the unexpected queue for a later post.
// - Small frames (up to TransportOptions::direct_max bytes) skip ZeroMQ: they go on one plain TCP
//   connection per pair of ranks (direct_link.h; the lower rank dials, both write it, so a frame
//   carries the TCP acknowledgement of the one before it), written by the sending thread and read by
//   the leader, so neither side crosses ZeroMQ's I/O thread (two cross-core wake-ups per direction,
//   tens of us on a VM). One sequence number per peer covers both paths and the receiver delivers
//   in that order, so a small frame never overtakes a large one sent before it. A leader busy-polls for a short
//   while (busy_poll) before it sleeps, as an answer to a small request comes back within it.
// - Large frames (from TransportOptions::stripe_min bytes) go over several more connections per
//   peer at once (stripes.h), each written and read by a thread of its own: one TCP stream moves
//   bytes at one core's copy rate. They land in reused blocks (no page faults per frame) and take
//   their turn by the same sequence number.
// - Payloads are zero-copy both ways: zmq_msg_init_data references the tensor's Storage (kept alive
//   until ZeroMQ lets go), and a received payload becomes a Storage adopting the zmq_msg_t.
// - Failure: every 200 ms each rank sends every peer a heartbeat (init_process_group: 4 to a
//   TROUPE_PEER_TIMEOUT_MS under 800 ms); a peer silent for 3 s (that timeout), or whose
//   connection closes (ZeroMQ monitor events) without a goodbye, breaks the transport: every
//   pending and later operation throws PeerLostError naming it. A peer that said goodbye only
//   fails operations that need it. Actor frames to the surviving ranks still go: remote actors
//   are supervised per rank (net/remote/).
// - Authentication: with the job's keys (job_secret.h), the ROUTER is a CURVE server and a ZAP
//   handler admits only clients holding the job's key pair, and every direct link and stripe opens
//   with a handshake (handshake.h) proving both ends hold the secret, so a process without it can
//   neither connect nor inject frames. Without keys (an insecure job) the handshakes still run,
//   with an all-zero key: they then only name the ranks.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "devices/host_staging.h"
#include "devices/tensor.h"
#include "net/job_secret.h"
#include "net/link.h"
#include "net/peer_liveness.h"
#include "net/links/direct_link.h"
#include "net/links/staged_link.h"
#include "net/links/stripe_link.h"
#include "net/links/zmq_link.h"
#include "net/frame.h"
#include "net/bootstrap/host_identity.h"
#include "net/work.h"

namespace troupe::net {

// Inboxes by who reads them: users' p2p tags and collectives (by sequence number), so neither can
// take the other's frames.
enum class Inbox : uint8_t { p2p, collective };

// A received frame: the sender's global rank, its validated header and the adopted payload.
struct Message {
  int source = -1;
  FrameHeader header;
  Tensor payload;
  std::vector<Tensor> parts;  // an actor frame's tensors, as the u8 bytes that came (adopted from
                              // ZeroMQ and the stripes; copied once out of a direct link's buffer)
};

// Where actor frames go (net/remote/): to a handler instead of the inboxes, and, for the remote
// actors' supervision, word of each lost peer. Both run on whichever thread noticed (the one
// draining the ROUTER, or the I/O thread's heartbeat check), so they must not block.
struct ActorHandler {
  std::function<void(Message&&)> on_frame;
  std::function<void(int rank, std::exception_ptr error)> on_peer_lost;  // died, cut off, said goodbye
};

struct TransportOptions {
  int rank = 0;
  int world_size = 1;
  std::string tcp_host = "127.0.0.1";  // interface address to bind tcp:// on; empty: no tcp
  bool ipc = true;                     // also bind an ipc:// endpoint
  std::string prefer = "auto";         // auto (ipc to same-host peers) | tcp | ipc
  // The job's keys (job_secret.h); unset: an insecure job (no CURVE, handshakes with a zero key).
  std::optional<JobKeys> keys;
  // Confidentiality (needs keys): frames through ZeroMQ under CURVE, on direct links and stripes
  // sealed with AES-256-GCM under the connection's session keys (sealed_stream.h).
  bool encrypt = false;
  std::chrono::milliseconds heartbeat_interval{200};
  std::chrono::milliseconds peer_timeout{3000};  // silent this long: lost ($TROUPE_PEER_TIMEOUT_MS)
  // Collectives between ranks on this host may use shared memory (net/collectives/shm_all_reduce.cpp).
  bool shared_memory = true;
  // Frames up to this many bytes go on the direct links (0: every frame through ZeroMQ). Direct
  // links need tcp.
  size_t direct_max = 64 << 10;
  // How long a waiting thread polls without sleeping, from when it starts waiting or last received.
  // Unset: chosen by the machine when the ranks are known (busy_poll_for).
  std::optional<std::chrono::microseconds> busy_poll;
  // How long the caller of a blocking collective of up to direct_max bytes polls without sleeping
  // for each frame, from when it starts waiting. Unset: chosen with busy_poll (small_collective_poll_for),
  // and none when busy_poll is 0.
  std::optional<std::chrono::microseconds> small_collective_poll;
  // Frames from stripe_min bytes up go over this many connections per peer at once (0: off).
  // Needs direct links (tcp).
  int stripes = 2;
  size_t stripe_min = 1 << 20;
};

// The busy-poll a transport uses unless told: 50 us while every rank on this machine (all its
// network namespaces) may have a CPU of its own, none when they outnumber the CPUs this process may
// run on (its affinity mask): there a spinning waiter takes the CPU from the very peer whose answer
// it waits for. 9 ranks in 4 namespaces of a 2-core machine, counted per namespace, spun 50 us in 6
// of them: a call to 8 mesh members took 564-603 us instead of 425-481.
std::chrono::microseconds busy_poll_for(int ranks_on_machine, int cpus);
// The same choice for a small collective's wait (three ranks in three namespaces of a 2-core
// machine spinning 10 ms each slowed an elastic training job past its test's limits): 10 ms, or
// none where they outnumber the CPUs.
// Its peer is waiting for it too, so a wait that sleeps makes the peer's next wait late, and the
// ranks end up taking turns to wake each other (a wake-up costs 50 us to milliseconds in a VM).
std::chrono::microseconds small_collective_poll_for(int ranks_on_machine, int cpus);

class Transport : private FrameSink {
 public:
  explicit Transport(TransportOptions options);  // binds and starts the I/O thread
  ~Transport();                                  // goodbye to peers, flushes, closes
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  int rank() const { return options_.rank; }
  int world_size() const { return options_.world_size; }
  const PeerAddress& address() const { return address_; }
  const std::optional<JobKeys>& keys() const { return options_.keys; }
  std::chrono::milliseconds heartbeat_interval() const { return options_.heartbeat_interval; }
  std::chrono::milliseconds peer_timeout() const { return options_.peer_timeout; }
  // The busy-poll in use: TransportOptions::busy_poll, or busy_poll_for this host once connected.
  std::chrono::microseconds busy_poll() const { return std::chrono::microseconds(busy_poll_us_.load(std::memory_order_relaxed)); }
  // The poll of a small collective's wait: TransportOptions::small_collective_poll, or chosen once connected.
  std::chrono::microseconds small_collective_poll() const {
    return std::chrono::microseconds(small_collective_poll_us_.load(std::memory_order_relaxed));
  }
  void* context() const { return context_; }  // for rendezvous sockets: same ZAP handler
  // The CPU this rank's waiting thread returns to (spread_over_machine), -1: none (the ranks of this
  // machine outnumber its CPUs, or it has one rank, or waiters do not spin).
  int home_cpu() const { return home_cpu_.load(std::memory_order_relaxed); }

  // Connects to every rank of the table (indexed by rank) and waits for each one's hello.
  // TimeoutError naming the ranks not heard from by the deadline.
  void connect(const std::vector<PeerAddress>& table, Deadline deadline);

  // Queues one frame to global rank dst (itself included). The header's source, seq, dtype,
  // shape and payload size are filled in here from the payload (undefined: no payload). Never
  // blocks. done, if given, finishes once the link let go of the payload (its bytes are on the wire).
  void send(int dst, FrameHeader header, const Tensor& payload,
            const std::shared_ptr<detail::Completion>& done = nullptr);
  // A p2p device tensor to another process on this host by the staged link (links/staged_link.h):
  // only a descriptor frame (kind staged) travels; StagedLink::unstage makes the tensor on arrival.
  // False when that link does not apply (or every segment to dst is still unread): send() it then.
  bool send_staged(int dst, FrameHeader header, const Tensor& payload, const std::shared_ptr<detail::Completion>& done);
  // An actor frame to another rank: the call frame bytes, then each tensor as its own part, by
  // reference (the link that takes it reads a host tensor's own bytes, and stages a device one).
  // Only the destination's health matters: remote actors outlive other ranks' deaths.
  // awaits_answer: the frame asks dst for an answer (a request). While dst still owes answers to
  // several frames sent before, a small one may wait (16 KiB kept at most) until this rank waits on
  // the transport, hears from a peer, or the I/O thread's next turn (about a
  // millisecond, and only while a thread leads): pipelined requests then cost one write per batch.
  void send_actor_frame(int dst, std::vector<uint8_t> call_frame, const std::vector<Tensor>& tensors,
                        bool awaits_answer = false);
  // While one lives, the direct-link frames this thread sends go out together when it ends (below).
  class SendBatch;
  // Installs the handler of actor frames (nullptr: none). Frames that came while there was none
  // (before the first, or between one RemoteActors and the next; up to 4,096, later
  // ones are dropped) are handed to the next handler first, in order.
  void set_actor_handler(std::shared_ptr<ActorHandler> handler);
  // From the handler: an actor frame it is not the one for, kept for the next handler, in order.
  void keep_actor_frame(Message frame);
  // The number of the next RemoteActors opened on this transport (1, 2, ...): its frames carry it,
  // so a peer's frames for an earlier or a later one are told apart. Counted per transport, not
  // per process: a process that joins a job later (an in-place elastic epoch's new group) opens
  // its first on that group's transport, as the others do.
  uint32_t open_actor_generation() { return ++actor_generations_; }
  // Receives on this thread (leading the ROUTER, see above; taking turns with other leaders) until
  // done() or the deadline: how a thread that waits for actor frames skips the I/O thread's hand-off.
  void drive(const std::function<bool()>& done, Deadline deadline);
  // The same for one slice at most, and only when no other thread leads: false then at once.
  bool try_drive(const std::function<bool()>& done, Deadline deadline, Clock::time_point poll_until = {});

  struct Slot;  // a posted receive
  // Posts a receive for (group, inbox, tag) from global rank source (-1: any). Matching is in post order.
  std::shared_ptr<Slot> post(uint64_t group, Inbox inbox, int64_t tag, int source);
  // The message, or nullopt when the deadline passed first (the receive is then cancelled and
  // consumes nothing). Rethrows PeerLostError / CommError when the transport broke. A leading
  // waiter polls without sleeping for poll_at_least from now, and busy_poll after any frame.
  std::optional<Message> wait(const std::shared_ptr<Slot>& slot, Deadline deadline,
                              std::chrono::microseconds poll_at_least = {});
  bool is_ready(const Slot& slot);

  // Whether global rank r runs on this host and may be reached without the network (itself
  // included); false for everyone when tcp:// is forced.
  bool is_local(int r) const;
  // Which host global rank r runs on (boot, mount and network namespace): equal ids, same host.
  // Known once connected; the same table on every rank.
  const std::string& host_id_of(int r) const;
  bool shared_memory() const { return options_.shared_memory; }
  size_t direct_max() const { return options_.direct_max; }

  // Throws the failure that broke the transport, if any.
  void check_healthy();
  // Throws PeerLostError when global rank r has gone (crashed or said goodbye).
  void check_peer(int r);
  // Whether global rank r was lost or said goodbye.
  bool is_gone(int r) const;
  // Whether global rank r was lost (crashed, cut off, or declared lost), not only said goodbye.
  bool is_lost(int r) const;
  // Global rank r is lost, as someone else found (a quorum's server saw its process end): the
  // transport breaks as if its own heartbeats had found it (PeerLostError with `why`).
  void declare_lost(int r, const std::string& why);

  // Frames dropped for carrying an unknown identity (not a rank of this job).
  uint64_t dropped_frames() const { return dropped_frames_.load(); }
  // Peers this rank sends small frames to over a direct link (known once connected).
  int direct_links() const;
  // Frames that came over a direct link so far.
  uint64_t direct_frames() const { return direct_frames_.load(); }
  // Frames that came striped so far.
  uint64_t striped_frames() const { return striped_frames_.load(); }

 private:
  struct Peer;
  using Key = std::tuple<uint64_t, Inbox, int64_t>;

  // transport_io.cpp: the I/O thread.
  void io_loop();
  // transport.cpp: one frame to another rank, its parts by reference (an actor frame's call frame,
  // then the tensors as they are), by the first link that takes it (direct, stripes, ZeroMQ), which
  // stages what is not contiguous host memory; h.seq is set here.
  void send_frame(int dst, FrameHeader& h, std::span<const uint8_t> head, std::span<const Tensor> tensors,
                  const std::shared_ptr<detail::Completion>& done, bool awaits_answer = false);
  void touch();  // a frame was just sent or received
  // Where the ranks of one machine (all its network namespaces) fit its CPUs and spin while they
  // wait, each rank's waiting thread gets a CPU of its own (home_cpu_), and is moved back there
  // when it starts to wait elsewhere: ranks started together start on one CPU, a sleeper is woken
  // on its waker's CPU, and two spinners on one CPU take turns by the scheduler's slice, 1-2 ms a
  // call (remote_bench on one 2-core host: round trip p90 115 us unplaced, 35 us placed; a 4-byte
  // all_reduce between two namespaces, 2,700 runs: 1 at 2 ms a call unplaced, none placed).
  void spread_over_machine();
  void go_home() const;  // to home_cpu_, if set and elsewhere: one pin and unpin (about 6 us)
  void wake();
  // Writes every frame a direct link holds (a SendBatch's, or one waiting for answers): before a
  // thread waits on the transport, when a frame came in, and when a SendBatch ends.
  void write_held();
  // With the receiving side held: every link's frames that came. How many.
  int receive_links();

  // frame_accept.cpp: every link hands each frame it received here (FrameSink), as its header's
  // bytes and its parts as u8 tensors owning their bytes, or as bytes in a buffer the link reuses
  // (each part copied once, straight into a tensor of the frame's dtype and shape). Decoded and
  // checked once; a bad frame loses the peer (CommError "rank N sent a bad frame"). False when refused.
  bool accept(int peer, Path path, std::span<const uint8_t> header, std::vector<Tensor> parts) override;
  bool accept(int peer, Path path, std::span<const uint8_t> header, std::span<const std::span<const uint8_t>> parts) override;
  void refuse(int peer, const std::exception& why) override;
  void suspect(int peer) override;  // its connection closed: lost unless its goodbye comes (tick())
  void drop() override { ++dropped_frames_; }
  // The checks every link's frames pass: decoded header, source, part count. CommError otherwise.
  FrameHeader check_frame(int peer, std::span<const uint8_t> header, size_t payload_size, size_t parts);
  // A checked frame of frame_bytes in all: counted by path, then taken in sequence order.
  void admit_frame(int peer, Path path, size_t frame_bytes, Message frame);
  Link& link_of(Path path);  // the link a frame came by
  // Takes a frame in the peer's sequence order: handled now, or held until the ones before it came.
  void take_frame(int peer, Message frame);
  void handle_frame(int peer, Message frame);

  // transport_receive.cpp: matching posted receives.
  // Leads for one slice with the receiving side held: receives until done() or the slice's end,
  // polling without sleeping while a frame was sent or received less than busy_poll ago.
  void lead_locked(const std::function<bool()>& done, Deadline deadline, Clock::time_point poll_until = {});
  // Until when a waiter polls without sleeping: poll_until, or busy_poll after the last frame.
  Clock::time_point polls_until(Clock::time_point poll_until) const;
  void deliver(Message message);  // with mutex_ held

  // transport_liveness.cpp: hello, heartbeats, goodbye, lost peers.
  void tick(Clock::time_point now);
  void send_control_locked(int r, FrameKind kind);  // with r's send_mutex held
  void break_transport(std::exception_ptr error);
  void lose_peer(int r, std::exception_ptr error);  // a crash or a bad frame: breaks the transport
  void peer_departed(int r);
  void tell_actor_handler(int r, std::exception_ptr error);

  TransportOptions options_;
  PeerAddress address_;
  std::vector<std::string> host_ids_;  // by global rank, set by connect()
  void* context_ = nullptr;
  std::mutex router_mutex_;  // the receiving side: whoever holds it receives on every link
  void* wake_rx_ = nullptr;  // the I/O thread's end
  void* wake_tx_ = nullptr;  // everyone else's end, under wake_mutex_
  std::mutex wake_mutex_;
  std::vector<std::unique_ptr<Peer>> peers_;
  PeerLiveness live_;  // hello, suspect and departed under mutex_
  std::unique_ptr<ZmqLink> zmq_;
  std::unique_ptr<DirectLink> direct_;    // null: no direct links (no tcp, CURVE, or direct_max 0)
  std::unique_ptr<StripeLink> stripes_;   // with the direct links (their listener takes its connections)
  StagedLink staged_;
  std::atomic<bool> connected_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> dropped_frames_{0};
  std::atomic<uint64_t> direct_frames_{0};
  std::atomic<uint64_t> striped_frames_{0};
  std::atomic<Clock::rep> last_activity_{0};  // when a frame was last sent or received
  std::atomic<bool> io_thread_reads_{false};  // the I/O thread holds the receiving side (a short turn)
  std::atomic<int64_t> busy_poll_us_{50};
  std::atomic<int64_t> small_collective_poll_us_{0};
  std::atomic<Clock::rep> last_lead_{0};      // when a waiting thread last held the receiving side
  std::atomic<bool> io_turns_soon_{false};  // the I/O thread sleeps a millisecond at most
  std::atomic<int> home_cpu_{-1};           // set once by connect(): spread_over_machine()
  std::thread io_thread_;

  std::mutex mutex_;  // guards everything below, and every Slot
  std::condition_variable hello_cv_;
  std::map<Key, std::deque<Message>> unexpected_;
  std::map<Key, std::deque<std::shared_ptr<Slot>>> posted_;
  std::vector<std::weak_ptr<detail::Completion>> pending_sends_;
  std::exception_ptr broken_;
  std::shared_ptr<ActorHandler> actor_handler_;
  int handler_calls_ = 0;  // lost peers being told to the handler (guarded by mutex_)
  std::condition_variable handler_idle_;
  std::deque<Message> actor_backlog_;  // actor frames that came while there was no handler
  std::atomic<uint32_t> actor_generations_{0};
};

// The direct-link frames a thread sends through `transport` while a SendBatch lives are written
// when it ends, one write per peer: a server answering the requests of one read makes one system
// call, not one per answer. A wait of that thread on the transport, or a frame it sends by another
// path, writes them first; failing both, the I/O thread writes them on its next turn (about a
// millisecond while a thread leads), so a method that blocks in a batch delays, never deadlocks.
//
//   {
//     Transport::SendBatch batch(transport);
//     for (QueuedCall& call : ready) answer(call);  // each answer kept
//   }                                         // all written here
class Transport::SendBatch {
 public:
  explicit SendBatch(Transport& transport);
  ~SendBatch();
  SendBatch(const SendBatch&) = delete;
  SendBatch& operator=(const SendBatch&) = delete;

 private:
  friend class Transport;
  Transport& transport_;
  SendBatch* outer_;  // the batch this one nests in, on this thread
};

}  // namespace troupe::net
