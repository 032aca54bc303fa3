#pragma once
// ProcessGroup: the ranks of a job, and point-to-point tensor messages between them.
//
//   auto world = troupe::net::init_process_group();          // env:// (troupe launch sets it)
//   Tensor t = Tensor::zeros({4});
//   if (world->rank() == 0) {
//     world->send(t, /*dst=*/1, /*tag=*/7);
//   } else {
//     world->recv(t, /*src=*/0, /*tag=*/7);                   // t becomes rank 0's tensor
//     int from = world->recv(t);                              // from any source, tag 0
//   }
//   Work w = world->irecv(t, 0);  ...  w.wait();              // non-blocking
//   auto pair = world->new_group({0, 1});                     // every rank calls it; nullptr if not a member
//
// Semantics
// - send() returns once the tensor's bytes are on the wire (small ones: once queued). Tensors are
//   copy-on-write values, so the sender may write to its tensor at once in every case.
// - recv(t) makes t the received tensor (zero-copy: it adopts the message's bytes). A defined t
//   fixes the expected dtype and shape: ShapeError / DTypeError when the sender's differ; an
//   undefined t takes whatever arrives. Other tensors sharing t's old bytes are not changed.
// - Messages between a pair with the same tag arrive in send order; receives match in the order
//   they were posted (irecv included). src = kAnySource takes the first that arrives.
// - Every blocking call has a deadline: the group's timeout (InitOptions::timeout, set_timeout())
//   or the per-call one. TimeoutError then, naming the peer and tag.
// - If any rank dies or its connection breaks, every pending and later operation on every
//   survivor throws PeerLostError naming it, within 5 s.
// - irecv(t): t must outlive the Work; it is filled when wait() returns.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "devices/tensor.h"
#include "net/work.h"

namespace troupe::net {

class Transport;

struct InitOptions {
  // env:// (MASTER_ADDR, MASTER_PORT and RANK/WORLD_SIZE, OMPI_COMM_WORLD_RANK/SIZE or
  // SLURM_PROCID/NTASKS; under mpirun or srun without MASTER_*, the address is derived from the
  // job: net/bootstrap/engine_env.h), tcp://HOST:PORT (rank 0 serves there) or file:///PATH. A HOST that does
  // not resolve is retried for TROUPE_RESOLVE_TIMEOUT seconds (30), then a CommError naming the
  // variable and the name (net/bootstrap/resolve.h); rank 0 needs no record of its own name.
  std::string init_method = "env://";
  int rank = -1;        // -1: from the environment
  int world_size = -1;  // -1: from the environment
  // Rendezvous deadline and the group's default operation timeout.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  // auto (ipc:// to peers on this host, tcp:// to others) | tcp | ipc; empty: $TROUPE_TRANSPORT or auto.
  std::string transport;
  // The job secret's file (job_secret.h); empty: $TROUPE_JOB_SECRET_FILE. A world of several ranks
  // without one is refused unless TROUPE_INSECURE=1; a world of one needs none.
  std::string secret_file;
  // Every frame encrypted (ZeroMQ CURVE; AES-256-GCM on direct links and stripes); false: $TROUPE_ENCRYPT=1.
  bool encrypt = false;
};

std::shared_ptr<class ProcessGroup> init_process_group(InitOptions options = {});

class ProcessGroup : public std::enable_shared_from_this<ProcessGroup> {
 public:
  static constexpr int kAnySource = -1;

  // Made by init_process_group() and new_group().
  ProcessGroup(std::shared_ptr<Transport> transport, uint64_t id, std::vector<int> global_ranks,
               std::chrono::milliseconds timeout);
  ~ProcessGroup();

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(global_ranks_.size()); }
  uint64_t id() const { return id_; }
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeout_ms_.load()); }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ms_ = timeout.count(); }

  void send(const Tensor& tensor, int dst, int64_t tag = 0,
            std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // Returns the source rank (useful with kAnySource).
  int recv(Tensor& tensor, int src = kAnySource, int64_t tag = 0,
           std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  Work isend(const Tensor& tensor, int dst, int64_t tag = 0);
  Work irecv(Tensor& tensor, int src = kAnySource, int64_t tag = 0);

  // A sub-group of ranks (in this group's numbering) with its own id: its traffic never mixes
  // with this group's. Every rank of this group calls it, in the same order, with the same ranks
  // (like torch.distributed.new_group); ranks not in it get nullptr.
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks);

  // Throws PeerLostError when group rank r has gone (crashed or said goodbye); for code that waits
  // on a rank by other means than a receive (a lookup, shared memory) and must not wait for a dead one.
  void check_peer(int r);

  // For the layers built on the group (net/channel.h, net/collectives/).
  Transport& transport() { return *transport_; }
  int global_rank(int group_rank) const;
  int group_rank(int global_rank) const;  // -1 when not a member
  // The group of `ranks` (group ranks, this one among them) whose id every rank derives from this
  // group's id and `key`, with no message: for sub-groups net/ makes itself (host_groups.cpp),
  // whose keys stay clear of new_group's, which counts its calls. User code wants new_group.
  std::shared_ptr<ProcessGroup> keyed_group(uint64_t key, const std::vector<int>& ranks);
  // State a layer above keeps per group (net/collectives/group_state.h: the collectives' numbering,
  // actor and cached algorithms): made by make(*this) on the first call with `key` (the address of
  // something of the caller's), destroyed with the group. The group never looks inside.
  void* attachment(const void* key, std::shared_ptr<void> (*make)(ProcessGroup&));

 private:
  void check_peer_rank(const char* op, int r, bool any_allowed) const;

  std::shared_ptr<Transport> transport_;
  uint64_t id_;
  std::vector<int> global_ranks_;
  int rank_;
  std::atomic<int64_t> timeout_ms_;
  std::atomic<uint64_t> child_groups_{0};
  std::mutex attachments_mutex_;
  std::vector<std::pair<const void*, std::shared_ptr<void>>> attachments_;
};

}  // namespace troupe::net
