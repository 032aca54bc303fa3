#include "net/process_group.h"

#include <cstdlib>
#include <iostream>
#include <numeric>
#include <set>

#include "devices/error.h"
#include "net/bootstrap/engine_env.h"
#include "net/bootstrap/rendezvous.h"
#include "net/bootstrap/resolve.h"
#include "net/transport.h"
#include "net/transport_env.h"

namespace troupe::net {

namespace {

constexpr std::chrono::milliseconds kShortestPeerTimeout{200};

std::optional<int> env_int(std::initializer_list<const char*> names, std::string* used) {
  for (const char* name : names) {
    const char* value = std::getenv(name);
    if (!value || !*value) continue;
    try {
      size_t n = 0;
      int v = std::stoi(value, &n);
      if (n != std::strlen(value)) throw std::invalid_argument(value);
      *used = name;
      return v;
    } catch (const std::exception&) {
      throw ValueError(std::string("init_process_group: ") + name + "='" + value + "' is not an integer");
    }
  }
  return std::nullopt;
}

std::string env_string(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The address this rank binds for the others, found from rank 0's host (named by `from`), unless
// TROUPE_HOST gives it. The other ranks resolve rank 0's host first in any case (waiting a bounded
// time for DNS: resolve.h), so that a name that never resolves is an error now, not a rendezvous
// that hangs until its timeout. Rank 0 serves the rendezvous on its own host and needs no name for
// that: where its name has no record yet (a Kubernetes pod before the Service publishes it), it
// takes its default route's interface.
std::string address_towards_master(const std::string& host, int port, const std::string& from, int rank,
                                   Deadline deadline) {
  const std::string given = env_string("TROUPE_HOST"), what = from + "=" + host;
  if (rank != 0) {
    const std::string numeric = detail::resolve_host(host, from, detail::resolve_patience(), deadline);
    return !given.empty() ? given : detail::local_address_towards(numeric, port, what);
  }
  if (!given.empty()) return given;
  if (auto numeric = detail::try_resolve_host(host)) return detail::local_address_towards(*numeric, port, what);
  if (auto mine = detail::default_route_address()) return *mine;
  throw CommError("init_process_group: rank 0: " + from + "='" + host +
                  "' does not resolve and this host has no default route: give rank 0 one of its own addresses (" +
                  from + " or TROUPE_HOST)");
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class SendWork final : public Work::Impl {
 public:
  SendWork(std::shared_ptr<detail::Completion> done, std::string what)
      : done_(std::move(done)), what_(std::move(what)) {}
  bool is_completed() override { return done_->is_done(); }
  void wait(Deadline deadline) override {
    if (!done_->wait_until(deadline)) throw TimeoutError(what_ + ": the bytes were not sent within the timeout");
  }

 private:
  std::shared_ptr<detail::Completion> done_;
  std::string what_;
};

class RecvWork final : public Work::Impl {
 public:
  RecvWork(std::shared_ptr<ProcessGroup> group, std::shared_ptr<Transport::Slot> slot, Tensor* target, int src,
           int64_t tag)
      : group_(std::move(group)), slot_(std::move(slot)), target_(target), src_(src), tag_(tag) {
    if (target->defined()) expected_ = target->meta();
  }

  bool is_completed() override {
    std::lock_guard lock(mutex_);
    return finished_ || group_->transport().is_ready(*slot_);
  }

  int source() const override {
    std::lock_guard lock(mutex_);
    return source_;
  }

  void wait(Deadline deadline) override {
    std::lock_guard lock(mutex_);
    if (!finished_) {
      finished_ = true;
      try {
        complete(deadline);
      } catch (...) {
        error_ = std::current_exception();
      }
    }
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::string what() const {
    return "recv from " + (src_ < 0 ? std::string("any rank") : "rank " + std::to_string(src_)) + " (tag " +
           std::to_string(tag_) + ", group " + std::to_string(group_->id()) + ")";
  }

  void complete(Deadline deadline) {
    std::optional<Message> m = group_->transport().wait(slot_, deadline);
    if (!m) throw TimeoutError(what() + ": nothing arrived within the timeout");
    // A device tensor from this host came through shared memory: it lands on the device asked for.
    if (m->header.kind == FrameKind::staged)
      m->payload = StagedLink::unstage(*m, expected_ ? expected_->device : Device::cpu());
    const int from = group_->group_rank(m->source);
    if (expected_) {
      const TensorMeta got = m->payload.meta();
      const std::string detail = what() + ": rank " + std::to_string(from) + " sent " + got.str() + ", expected " +
                                 TensorMeta{expected_->dtype, expected_->shape, Device::cpu()}.str();
      if (got.dtype != expected_->dtype) throw DTypeError(detail);
      if (got.shape != expected_->shape) throw ShapeError(detail);
      *target_ = expected_->device.is_cpu() ? m->payload : m->payload.to(expected_->device);
    } else {
      *target_ = m->payload;
    }
    source_ = from;
  }

  mutable std::mutex mutex_;
  std::shared_ptr<ProcessGroup> group_;
  std::shared_ptr<Transport::Slot> slot_;
  Tensor* target_;
  std::optional<TensorMeta> expected_;
  int src_;
  int64_t tag_;
  bool finished_ = false;
  std::exception_ptr error_;
  int source_ = -1;
};

}  // namespace

TransportOptions transport_options_from_env(const InitOptions& options) {
  TransportOptions t;
  t.rank = options.rank;
  t.world_size = options.world_size;
  t.prefer = !options.transport.empty() ? options.transport : env_string("TROUPE_TRANSPORT");
  if (t.prefer.empty()) t.prefer = "auto";
  if (t.prefer != "auto" && t.prefer != "tcp" && t.prefer != "ipc")
    throw ValueError("init_process_group: transport must be auto, tcp or ipc, got '" + t.prefer + "'");
  t.ipc = t.prefer != "tcp";
  t.shared_memory = env_string("TROUPE_SHM") != "0";
  std::string used;
  if (auto v = env_int({"TROUPE_DIRECT_MAX"}, &used)) {
    if (*v < 0) throw ValueError("init_process_group: TROUPE_DIRECT_MAX=" + std::to_string(*v) + " is negative");
    t.direct_max = static_cast<size_t>(*v);
  }
  if (auto v = env_int({"TROUPE_PEER_TIMEOUT_MS"}, &used)) {
    // Heartbeats every 200 ms, or 4 to a shorter timeout (a few may be late, not all), 50 ms at least.
    if (*v < kShortestPeerTimeout.count())
      throw ValueError("init_process_group: TROUPE_PEER_TIMEOUT_MS=" + std::to_string(*v) + " is under " +
                       std::to_string(kShortestPeerTimeout.count()) + " ms (4 heartbeats of 50 ms)");
    t.peer_timeout = std::chrono::milliseconds(*v);
    t.heartbeat_interval = std::min(t.heartbeat_interval, t.peer_timeout / 4);
  }
  if (auto v = env_int({"TROUPE_STRIPES"}, &used)) {
    if (*v < 0 || *v > kMaxStripes)
      throw ValueError("init_process_group: TROUPE_STRIPES=" + std::to_string(*v) + ", expected 0.." +
                       std::to_string(kMaxStripes));
    t.stripes = static_cast<int>(*v);
  }
  if (auto v = env_int({"TROUPE_STRIPE_MIN"}, &used)) {
    if (*v < 0) throw ValueError("init_process_group: TROUPE_STRIPE_MIN=" + std::to_string(*v) + " is negative");
    t.stripe_min = static_cast<size_t>(*v);
  }
  if (auto v = env_int({"TROUPE_BUSY_POLL_US"}, &used)) {
    if (*v < 0) throw ValueError("init_process_group: TROUPE_BUSY_POLL_US=" + std::to_string(*v) + " is negative");
    t.busy_poll = std::chrono::microseconds(*v);
  }
  if (auto v = env_int({"TROUPE_SMALL_COLLECTIVE_POLL_US"}, &used)) {
    if (*v < 0)
      throw ValueError("init_process_group: TROUPE_SMALL_COLLECTIVE_POLL_US=" + std::to_string(*v) + " is negative");
    t.small_collective_poll = std::chrono::microseconds(*v);
  }
  return t;
}

void add_job_keys_from_env(TransportOptions& t, const InitOptions& options) {
  if (!env_string("TROUPE_CURVE_SECRET_FILE").empty())
    throw ValueError("init_process_group: TROUPE_CURVE_SECRET_FILE is gone: set TROUPE_JOB_SECRET_FILE to a job "
                     "secret (`troupe secret FILE`), which now keys CURVE and every other connection");
  const std::string secret_file = !options.secret_file.empty() ? options.secret_file : env_string("TROUPE_JOB_SECRET_FILE");
  const bool insecure = env_string("TROUPE_INSECURE") == "1";
  t.encrypt = options.encrypt || env_string("TROUPE_ENCRYPT") == "1";
  if (!secret_file.empty()) {
    t.keys = derive_job_keys(load_job_secret_file(secret_file));
  } else if (t.encrypt) {
    throw ValueError("init_process_group: encryption (TROUPE_ENCRYPT=1) needs the job secret: " +
                     missing_job_secret_message());
  } else if (options.world_size > 1 && !insecure) {
    throw ValueError("init_process_group: " + missing_job_secret_message());
  } else if (options.world_size > 1 && options.rank == 0) {
    std::cerr << "troupe: warning: TROUPE_INSECURE=1: this job has no secret; any process that reaches its ports "
                 "can join it, spawn its actors and read its frames\n";
  }
}

std::shared_ptr<ProcessGroup> init_process_group(InitOptions options) {
  std::string rank_from = "InitOptions::rank", world_from = "InitOptions::world_size";
  if (options.rank < 0) {
    auto r = env_int({"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}, &rank_from);
    if (!r)
      throw ValueError("init_process_group: no rank: pass InitOptions::rank or set RANK (or OMPI_COMM_WORLD_RANK, "
                       "SLURM_PROCID)");
    options.rank = *r;
  }
  if (options.world_size < 0) {
    auto w = env_int({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"}, &world_from);
    if (!w)
      throw ValueError("init_process_group: no world size: pass InitOptions::world_size or set WORLD_SIZE (or "
                       "OMPI_COMM_WORLD_SIZE, SLURM_NTASKS)");
    options.world_size = *w;
  }
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size)
    throw ValueError("init_process_group: rank " + std::to_string(options.rank) + " (" + rank_from +
                     ") outside a world of " + std::to_string(options.world_size) + " (" + world_from + ")");

  std::string method = options.init_method;
  std::string master_from = "init_method";  // where rank 0's host came from, for the messages
  if (method == "env://") {
    const std::string addr = env_string("MASTER_ADDR"), port = env_string("MASTER_PORT");
    if (!addr.empty() && !port.empty()) {
      method = "tcp://" + addr + ":" + port;
      master_from = "MASTER_ADDR";
    } else if (auto master = detail::master_from_engine(std::getenv)) {
      method = "tcp://" + master->host + ":" + std::to_string(master->port);
      master_from = master->from;
    } else {
      throw ValueError("init_process_group: env:// needs MASTER_ADDR and MASTER_PORT (troupe launch sets them; "
                       "under mpirun or srun they are derived from the job)");
    }
  }

  const Deadline deadline = deadline_after(options.timeout);
  TransportOptions t = transport_options_from_env(options);
  if (method.rfind("tcp://", 0) == 0) {
    auto [host, port] = split_host_port(method.substr(6));
    t.tcp_host = address_towards_master(host, port, master_from, options.rank, deadline);
  } else if (!env_string("TROUPE_HOST").empty()) {
    t.tcp_host = env_string("TROUPE_HOST");
  } else {
    // file://: no host to aim at; the default route's interface, loopback on a host without one.
    t.tcp_host = detail::default_route_address().value_or("127.0.0.1");
  }
  add_job_keys_from_env(t, options);
  auto transport = std::make_shared<Transport>(t);
  std::vector<PeerAddress> table = rendezvous(method, options.rank, options.world_size, *transport, deadline);
  transport->connect(table, deadline);
  std::vector<int> ranks(options.world_size);
  std::iota(ranks.begin(), ranks.end(), 0);
  return std::make_shared<ProcessGroup>(std::move(transport), 0, std::move(ranks), options.timeout);
}

ProcessGroup::ProcessGroup(std::shared_ptr<Transport> transport, uint64_t id, std::vector<int> global_ranks,
                           std::chrono::milliseconds timeout)
    : transport_(std::move(transport)), id_(id), global_ranks_(std::move(global_ranks)), timeout_ms_(timeout.count()) {
  rank_ = group_rank(transport_->rank());
  if (rank_ < 0) throw ValueError("ProcessGroup: this process (global rank " + std::to_string(transport_->rank()) +
                                  ") is not a member");
}

ProcessGroup::~ProcessGroup() = default;

int ProcessGroup::global_rank(int group_rank) const { return global_ranks_.at(group_rank); }

int ProcessGroup::group_rank(int global) const {
  for (size_t i = 0; i < global_ranks_.size(); ++i)
    if (global_ranks_[i] == global) return static_cast<int>(i);
  return -1;
}

void ProcessGroup::check_peer_rank(const char* op, int r, bool any_allowed) const {
  if (any_allowed && r == kAnySource) return;
  if (r < 0 || r >= size())
    throw IndexError(std::string(op) + ": rank " + std::to_string(r) + " outside a group of " + std::to_string(size()) +
                     (any_allowed ? " (kAnySource is -1)" : ""));
}

void ProcessGroup::check_peer(int r) {
  check_peer_rank("check_peer", r, false);
  transport_->check_peer(global_rank(r));
}

Work ProcessGroup::isend(const Tensor& tensor, int dst, int64_t tag) {
  if (!tensor.defined()) throw ValueError("send: the tensor is undefined");
  check_peer_rank("send", dst, false);
  FrameHeader h;
  h.kind = FrameKind::data;
  h.group = id_;
  h.tag = tag;
  auto done = std::make_shared<detail::Completion>();
  if (!transport_->send_staged(global_rank(dst), h, tensor, done)) transport_->send(global_rank(dst), h, tensor, done);
  auto work = std::make_shared<SendWork>(
      done, "send of " + tensor.meta().str() + " to rank " + std::to_string(dst) + " (tag " + std::to_string(tag) + ")");
  work->default_timeout = timeout();
  return Work(std::move(work));
}

void ProcessGroup::send(const Tensor& tensor, int dst, int64_t tag, std::optional<std::chrono::milliseconds> timeout) {
  isend(tensor, dst, tag).wait(timeout.value_or(this->timeout()));
}

Work ProcessGroup::irecv(Tensor& tensor, int src, int64_t tag) {
  check_peer_rank("recv", src, true);
  auto slot = transport_->post(id_, Inbox::p2p, tag, src == kAnySource ? -1 : global_rank(src));
  auto work = std::make_shared<RecvWork>(shared_from_this(), std::move(slot), &tensor, src, tag);
  work->default_timeout = timeout();
  return Work(std::move(work));
}

int ProcessGroup::recv(Tensor& tensor, int src, int64_t tag, std::optional<std::chrono::milliseconds> timeout) {
  Work work = irecv(tensor, src, tag);
  work.wait(timeout.value_or(this->timeout()));
  return work.source();
}

std::shared_ptr<ProcessGroup> ProcessGroup::new_group(const std::vector<int>& ranks) {
  if (ranks.empty()) throw ValueError("new_group: no ranks given");
  std::set<int> seen;
  for (int r : ranks) {
    if (r < 0 || r >= size())
      throw IndexError("new_group: rank " + std::to_string(r) + " outside a group of " + std::to_string(size()));
    if (!seen.insert(r).second) throw ValueError("new_group: rank " + std::to_string(r) + " listed twice");
  }
  // Every rank derives the same id from (parent id, how many groups the parent made so far).
  const uint64_t key = ++child_groups_;
  if (!seen.count(rank_)) return nullptr;
  return keyed_group(key, ranks);
}

std::shared_ptr<ProcessGroup> ProcessGroup::keyed_group(uint64_t key, const std::vector<int>& ranks) {
  std::vector<int> globals;
  for (int r : ranks) globals.push_back(global_rank(r));
  const uint64_t id = splitmix64(id_ ^ splitmix64(key)) | 1;  // never 0, the world's id
  return std::make_shared<ProcessGroup>(transport_, id, std::move(globals), timeout());
}

void* ProcessGroup::attachment(const void* key, std::shared_ptr<void> (*make)(ProcessGroup&)) {
  std::lock_guard lock(attachments_mutex_);
  for (auto& [k, state] : attachments_)
    if (k == key) return state.get();
  attachments_.emplace_back(key, make(*this));
  return attachments_.back().second.get();
}

}  // namespace troupe::net
