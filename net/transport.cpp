#include "net/transport.h"

#include <malloc.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "actors/handoff.h"
#include "actors/metrics.h"
#include "actors/metrics_server.h"
#include "actors/profiler.h"
#include "devices/error.h"

namespace troupe::net {

namespace {

// Payloads up to this size are copied into the message: cheaper than the free callback.
constexpr size_t kCopyBelow = 4096;
constexpr int kLingerMs = 2000;
constexpr auto kDisconnectGrace = std::chrono::milliseconds(500);
constexpr auto kGoodbyeWait = std::chrono::milliseconds(200);
constexpr auto kLeadSlice = std::chrono::milliseconds(2);  // then the I/O thread gets a turn
constexpr size_t kMaxActorParts = 1 << 16;  // tensors of one actor frame
constexpr size_t kMaxHeldFrames = 1 << 20;  // frames from one peer waiting for one sent before them

[[noreturn]] void zmq_fail(const std::string& what) {
  throw CommError("transport: " + what + ": " + zmq_strerror(zmq_errno()));
}

void set_int(void* socket, int option, int value) {
  if (zmq_setsockopt(socket, option, &value, sizeof value) != 0) zmq_fail("zmq_setsockopt " + std::to_string(option));
}

void set_string(void* socket, int option, const std::string& value) {
  if (zmq_setsockopt(socket, option, value.data(), value.size()) != 0)
    zmq_fail("zmq_setsockopt " + std::to_string(option));
}

// Bytes (headers included) and frames per peer and path, both ways (metrics.h): what troupe top
// shows per link. Heartbeats and the other control frames are not counted.
enum Path { zmq_path, direct_path, stripes_path };
struct LinkCounters {
  metrics::Counter* sent_bytes;
  metrics::Counter* sent_frames;
  metrics::Counter* received_bytes;
  metrics::Counter* received_frames;
};

std::array<LinkCounters, 3> link_counters(int peer) {
  std::array<LinkCounters, 3> out;
  const char* names[] = {"zmq", "direct", "stripes"};
  for (int p = 0; p < 3; ++p) {
    const metrics::Labels labels{{"peer", std::to_string(peer)}, {"path", names[p]}};
    out[p] = {&metrics::counter("troupe_transport_sent_bytes_total", "Bytes sent to a peer, headers included", labels),
              &metrics::counter("troupe_transport_sent_frames_total", "Frames sent to a peer", labels),
              &metrics::counter("troupe_transport_received_bytes_total", "Bytes received from a peer, headers included",
                                labels),
              &metrics::counter("troupe_transport_received_frames_total", "Frames received from a peer", labels)};
  }
  return out;
}

size_t parts_bytes(std::span<const std::span<const uint8_t>> parts) {
  size_t bytes = 0;
  for (const auto& p : parts) bytes += p.size();
  return bytes;
}

std::string last_endpoint(void* socket) {
  char buffer[512];
  size_t size = sizeof buffer;
  if (zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, buffer, &size) != 0) zmq_fail("ZMQ_LAST_ENDPOINT");
  return std::string(buffer, strnlen(buffer, size));
}

// Sends one message part, retrying when a signal interrupts the call.
bool send_part(zmq_msg_t* msg, void* socket, int flags) {
  while (zmq_msg_send(msg, socket, flags) < 0) {
    if (zmq_errno() != EINTR) return false;
  }
  return true;
}

// Identity a rank's DEALER presents to every ROUTER: 'T' then its rank (4 bytes).
std::string routing_id(int rank) {
  std::string id(5, 'T');
  std::memcpy(id.data() + 1, &rank, 4);
  return id;
}

int rank_of_routing_id(const zmq_msg_t* msg, int world) {
  if (zmq_msg_size(msg) != 5) return -1;
  const auto* data = static_cast<const char*>(zmq_msg_data(const_cast<zmq_msg_t*>(msg)));
  if (data[0] != 'T') return -1;
  int rank;
  std::memcpy(&rank, data + 1, 4);
  return rank >= 0 && rank < world ? rank : -1;
}

std::string read_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string ipc_dir() {
  const char* t = std::getenv("TMPDIR");
  return t && *t && std::strlen(t) < 60 ? t : "/tmp";
}

std::string host_id() {
  // Same boot; the same directory for ipc sockets (device and inode: `ip netns exec` gives each
  // process a mount namespace of its own over the same files); the same pid namespace (shared
  // memory is mapped through /proc/<pid>); the same network namespace (so a netns test really goes
  // over tcp).
  std::error_code ec;
  auto ns = [&](const char* p) { return std::filesystem::read_symlink(p, ec).string(); };
  struct stat dir {};
  const std::string where = ::stat(ipc_dir().c_str(), &dir) == 0
                                ? std::to_string(dir.st_dev) + ":" + std::to_string(dir.st_ino)
                                : ns("/proc/self/ns/mnt");
  return read_line("/proc/sys/kernel/random/boot_id") + "/" + where + "/" + ns("/proc/self/ns/pid") + "/" +
         ns("/proc/self/ns/net");
}

std::string ipc_path(int rank) {
  static std::atomic<int> counter{0};
  return ipc_dir() + "/troupe-" + std::to_string(::getpid()) + "-" + std::to_string(rank) + "-" +
         std::to_string(counter++) + ".sock";
}

Tensor adopt_payload(zmq_msg_t* msg, DType dtype, const Shape& shape) {
  const size_t size = zmq_msg_size(msg);
  if (size == 0) return Tensor::empty(shape, dtype);
  // Move first: a small message keeps its bytes inside the zmq_msg_t itself.
  auto* owned = new zmq_msg_t;
  zmq_msg_init(owned);
  zmq_msg_move(owned, msg);
  void* data = zmq_msg_data(owned);
  // ZeroMQ may hand small messages out of a shared receive buffer at any offset: copy those
  // whose elements would be misaligned, adopt the rest (large ones are 8-byte aligned mallocs).
  if (reinterpret_cast<uintptr_t>(data) % itemsize(dtype) != 0) {
    Tensor t = Tensor::empty(shape, dtype);
    std::memcpy(t.mutable_raw_data(), data, size);
    zmq_msg_close(owned);
    delete owned;
    return t;
  }
  auto storage = std::make_shared<Storage>(data, size, Device::cpu(), [owned](void*) {
    zmq_msg_close(owned);
    delete owned;
  });
  return Tensor(storage, dtype, shape, contiguous_strides(shape), 0);
}

// Keeps a sent tensor's bytes alive until ZeroMQ has written them out.
struct SendHold {
  std::shared_ptr<Storage> storage;
  std::shared_ptr<detail::Completion> done;
};

void release_send_hold(void*, void* hint) {
  auto* hold = static_cast<SendHold*>(hint);
  troupe::detail::take_over(hold);  // on ZeroMQ's I/O thread
  if (hold->done) hold->done->finish();
  delete hold;
}

// Sends a host tensor's bytes as one message part: by reference above kCopyBelow (the storage is
// held until ZeroMQ lets go, then done finishes), copied below.
void send_tensor_part(void* socket, const Tensor& host, int flags, const std::shared_ptr<detail::Completion>& done,
                      int dst) {
  const size_t bytes = host.nbytes();
  zmq_msg_t body;
  if (bytes > kCopyBelow) {
    auto* hold = new SendHold{host.storage(), done};
    troupe::detail::hand_over(hold);
    if (zmq_msg_init_data(&body, const_cast<void*>(host.raw_data()), bytes, release_send_hold, hold) != 0) {
      delete hold;
      zmq_fail("zmq_msg_init_data");
    }
  } else {
    zmq_msg_init_size(&body, bytes);
    if (bytes > 0) std::memcpy(zmq_msg_data(&body), host.raw_data(), bytes);
  }
  if (!send_part(&body, socket, flags)) {
    zmq_msg_close(&body);
    zmq_fail("send to rank " + std::to_string(dst));
  }
}

Lane lane_of(FrameKind kind) {
  if (kind == FrameKind::data) return Lane::p2p;
  return Lane::collective;
}

}  // namespace

std::string PeerAddress::serialize() const {
  return tcp + "|" + ipc + "|" + host_id + (direct.empty() ? "" : "|" + direct);
}

PeerAddress PeerAddress::parse(const std::string& text) {
  std::vector<std::string> fields;
  for (size_t at = 0;;) {
    const size_t bar = text.find('|', at);
    fields.push_back(text.substr(at, bar == std::string::npos ? std::string::npos : bar - at));
    if (bar == std::string::npos) break;
    at = bar + 1;
  }
  if (fields.size() != 3 && fields.size() != 4) throw CommError("rendezvous: malformed peer address '" + text + "'");
  if (fields.size() == 4 && fields[3].empty())
    throw CommError("rendezvous: malformed peer address '" + text + "': an empty direct endpoint");
  PeerAddress p{fields[0], fields[1], fields[2], fields.size() == 4 ? fields[3] : ""};
  if (p.tcp.empty() && p.ipc.empty()) throw CommError("rendezvous: peer address without endpoints");
  return p;
}

struct Transport::Peer {
  std::mutex send_mutex;
  void* dealer = nullptr;      // set once by connect()
  uint64_t next_seq = 0;       // under send_mutex
  void* monitor = nullptr;     // I/O thread after connect()
  uint64_t expected_seq = 0;   // under router_mutex_
  std::atomic<Clock::rep> last_seen{0};  // when a frame last came (time_since_epoch ticks)
  bool suspect = false;        // under mutex_: its connection closed, no goodbye yet
  Clock::time_point suspect_since;
  bool hello = false;          // under mutex_
  std::atomic<bool> departed{false};
  std::atomic<bool> lost{false};  // crashed, cut off, or sent a bad frame
  std::exception_ptr lost_error;  // under mutex_
  bool local = false;          // set once by connect(): same host, ipc:// allowed
  std::unique_ptr<DirectSender> direct;  // set once by connect(); used under send_mutex
  std::atomic<bool> direct_backlogged{false};  // the I/O thread writes the rest when it can
  std::atomic<bool> direct_broken{false};      // the direct link failed: the peer is suspect
  // Frames that came before their turn (by sequence number), under router_mutex_.
  struct Held {
    FrameHeader header;
    Tensor payload;
    std::vector<Tensor> extra;
  };
  std::map<uint64_t, Held> held;
  std::array<LinkCounters, 3> link{};  // by Path; set by the constructor (not for this rank)

  void count_sent(Path path, size_t bytes) {
    link[path].sent_bytes->add(bytes);
    link[path].sent_frames->add();
  }
  void count_received(Path path, size_t bytes) {
    link[path].received_bytes->add(bytes);
    link[path].received_frames->add();
  }
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

Transport::Transport(TransportOptions options) : options_(std::move(options)) {
  // ZeroMQ mallocs every received message. glibc would serve big ones with fresh mmaps and trim
  // freed heap back to the kernel, so every 1 MiB chunk of a collective would page-fault in anew
  // (slow here: freed pages go back to the hypervisor). Keep them in the heap instead.
  static std::once_flag malloc_tuned;
  std::call_once(malloc_tuned, [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
  });
  if (options_.world_size < 1 || options_.rank < 0 || options_.rank >= options_.world_size)
    throw ValueError("transport: rank " + std::to_string(options_.rank) + " outside a world of " +
                     std::to_string(options_.world_size));
  for (int r = 0; r < options_.world_size; ++r) {
    peers_.push_back(std::make_unique<Peer>());
    if (r != options_.rank) peers_.back()->link = link_counters(r);
  }
  metrics::serve_from_env();
  Profiler::start_job_trace_from_env();
  context_ = zmq_ctx_new();
  if (!context_) zmq_fail("zmq_ctx_new");
  zmq_ctx_set(context_, ZMQ_BLOCKY, 0);
  try {
    if (options_.curve) {
      // The ZAP handler must exist before the ROUTER binds, or CURVE admits every client.
      zap_ = zmq_socket(context_, ZMQ_REP);
      set_int(zap_, ZMQ_LINGER, 0);
      if (zmq_bind(zap_, "inproc://zeromq.zap.01") != 0) zmq_fail("bind ZAP handler");
    }
    router_ = zmq_socket(context_, ZMQ_ROUTER);
    set_int(router_, ZMQ_RCVHWM, 0);
    set_int(router_, ZMQ_LINGER, 0);
    set_int(router_, ZMQ_ROUTER_HANDOVER, 1);
    if (options_.curve) {
      set_int(router_, ZMQ_CURVE_SERVER, 1);
      set_string(router_, ZMQ_CURVE_SECRETKEY, options_.curve->secret_key);
      set_string(router_, ZMQ_ZAP_DOMAIN, "troupe");
    }
    if (!options_.tcp_host.empty()) {
      const std::string endpoint = "tcp://" + options_.tcp_host + ":*";
      if (zmq_bind(router_, endpoint.c_str()) != 0) zmq_fail("bind " + endpoint);
      address_.tcp = last_endpoint(router_);
    }
    if (options_.ipc) {
      const std::string path = ipc_path(options_.rank);
      ::unlink(path.c_str());
      if (zmq_bind(router_, ("ipc://" + path).c_str()) != 0) zmq_fail("bind ipc://" + path);
      address_.ipc = "ipc://" + path;
    }
    if (address_.tcp.empty() && address_.ipc.empty()) throw ValueError("transport: neither tcp nor ipc enabled");
    size_t fd_size = sizeof router_fd_;
    if (zmq_getsockopt(router_, ZMQ_FD, &router_fd_, &fd_size) != 0) zmq_fail("ZMQ_FD");
    address_.host_id = host_id();
    if (!options_.tcp_host.empty() && options_.direct_max > 0 && !options_.curve) {
      if (options_.direct_max + 4096 > kDirectRecordMax)
        throw ValueError("transport: direct_max " + std::to_string(options_.direct_max) + " bytes, at most " +
                         std::to_string(kDirectRecordMax - 4096));
      if (options_.stripes < 0 || options_.stripes > kMaxStripes)
        throw ValueError("transport: " + std::to_string(options_.stripes) + " stripes, expected 0.." +
                         std::to_string(kMaxStripes));
      listener_ = std::make_unique<DirectListener>(options_.tcp_host);
      address_.direct = listener_->endpoint();
      striped_ready_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
      StripeReceivers::Events events;
      events.on_ready = [this] {
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t n = ::write(striped_ready_fd_, &one, sizeof one);
      };
      events.on_closed = [this](int r) { suspect_peer(r); };
      events.on_error = [this](int r, std::exception_ptr error) {
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          lose_peer(r, std::make_exception_ptr(
                           CommError("transport: rank " + std::to_string(r) + " sent a bad frame: " + e.what())));
        }
      };
      stripes_in_ = std::make_unique<StripeReceivers>(options_.rank, options_.world_size, std::move(events),
                                                      options_.peer_timeout);
    }

    const std::string wake_endpoint = "inproc://troupe-wake";
    wake_rx_ = zmq_socket(context_, ZMQ_PAIR);
    set_int(wake_rx_, ZMQ_LINGER, 0);
    if (zmq_bind(wake_rx_, wake_endpoint.c_str()) != 0) zmq_fail("bind wake socket");
    wake_tx_ = zmq_socket(context_, ZMQ_PAIR);
    set_int(wake_tx_, ZMQ_LINGER, 0);
    if (zmq_connect(wake_tx_, wake_endpoint.c_str()) != 0) zmq_fail("connect wake socket");
  } catch (...) {
    for (void* s : {zap_, router_, wake_rx_, wake_tx_})
      if (s) zmq_close(s);
    zmq_ctx_term(context_);
    throw;
  }
  io_thread_ = std::thread(&Transport::io_loop, this);
}

Transport::~Transport() {
  if (connected_) {
    // What the direct links still keep goes out first (ZeroMQ lingers on its own below).
    const Deadline linger = Clock::now() + std::chrono::milliseconds(kLingerMs);
    for (auto& peer : peers_) {
      std::lock_guard lock(peer->send_mutex);
      if (peer->direct && !peer->lost && !peer->departed) peer->direct->flush_until(linger);
    }
    if (stripes_out_) stripes_out_->flush_until(linger);
    for (int r = 0; r < world_size(); ++r) {
      Peer& peer = *peers_[r];
      if (r == rank() || peer.departed) continue;
      std::lock_guard lock(peer.send_mutex);
      send_control_locked(peer, FrameKind::goodbye);
    }
    // Peers ending at the same time say goodbye too; who did need not be waited for on close.
    std::unique_lock lock(mutex_);
    hello_cv_.wait_for(lock, kGoodbyeWait, [&] {
      for (int r = 0; r < world_size(); ++r)
        if (r != rank() && !peers_[r]->departed && !peers_[r]->lost) return false;
      return true;
    });
  }
  stopping_ = true;
  wake();
  io_thread_.join();
  stripes_out_.reset();
  stripes_in_.reset();
  if (striped_ready_fd_ >= 0) ::close(striped_ready_fd_);
  for (auto& peer : peers_) {
    if (!peer->dealer) continue;
    // Flush what we sent to live peers, also after another rank was lost (remote actors on the
    // survivors still talk); drop what is queued for the gone and the never heard from.
    set_int(peer->dealer, ZMQ_LINGER, peer->lost || peer->departed || !peer->hello ? 0 : kLingerMs);
    zmq_close(peer->dealer);
  }
  zmq_close(wake_tx_);
  zmq_ctx_term(context_);
  if (!address_.ipc.empty()) ::unlink(address_.ipc.substr(6).c_str());
}

void Transport::wake() {
  std::lock_guard lock(wake_mutex_);
  zmq_send(wake_tx_, "", 0, ZMQ_DONTWAIT);
}

void Transport::connect(const std::vector<PeerAddress>& table, Deadline deadline) {
  if (static_cast<int>(table.size()) != world_size())
    throw CommError("transport: address table has " + std::to_string(table.size()) + " ranks, world has " +
                    std::to_string(world_size()));
  host_ids_.clear();
  for (const PeerAddress& a : table) host_ids_.push_back(a.host_id);
  host_ids_[static_cast<size_t>(rank())] = address_.host_id;
  for (int r = 0; r < world_size(); ++r) {
    if (r == rank()) continue;
    const PeerAddress& a = table[r];
    const bool same_host = a.host_id == address_.host_id && !a.ipc.empty();
    peers_[r]->local = same_host && options_.prefer != "tcp";
    std::string endpoint;
    if (options_.prefer == "ipc") endpoint = a.ipc;
    else if (options_.prefer == "tcp") endpoint = a.tcp;
    else endpoint = same_host ? a.ipc : a.tcp;
    if (endpoint.empty())
      throw CommError("transport: rank " + std::to_string(r) + " has no " + options_.prefer +
                      " endpoint (it advertised '" + a.serialize() + "')");

    Peer& peer = *peers_[r];
    peer.dealer = zmq_socket(context_, ZMQ_DEALER);
    set_string(peer.dealer, ZMQ_ROUTING_ID, routing_id(rank()));
    set_int(peer.dealer, ZMQ_SNDHWM, 0);  // sends never block; tensors are queued by reference
    set_int(peer.dealer, ZMQ_LINGER, kLingerMs);
    if (options_.curve) {
      set_string(peer.dealer, ZMQ_CURVE_SERVERKEY, options_.curve->public_key);
      set_string(peer.dealer, ZMQ_CURVE_PUBLICKEY, options_.curve->public_key);
      set_string(peer.dealer, ZMQ_CURVE_SECRETKEY, options_.curve->secret_key);
    }
    const std::string monitor_endpoint = "inproc://troupe-monitor-" + std::to_string(r);
    if (zmq_socket_monitor(peer.dealer, monitor_endpoint.c_str(), ZMQ_EVENT_DISCONNECTED) != 0)
      zmq_fail("zmq_socket_monitor");
    peer.monitor = zmq_socket(context_, ZMQ_PAIR);
    set_int(peer.monitor, ZMQ_LINGER, 0);
    if (zmq_connect(peer.monitor, monitor_endpoint.c_str()) != 0) zmq_fail("connect monitor");
    if (zmq_connect(peer.dealer, endpoint.c_str()) != 0) zmq_fail("connect " + endpoint);
    std::lock_guard lock(peer.send_mutex);
    if (listener_ && !a.direct.empty()) {
      try {
        peer.direct = std::make_unique<DirectSender>(a.direct, rank(), deadline);
      } catch (const CommError&) {
        // Unreachable by plain TCP (a firewall, say): its frames all take ZeroMQ, which reached it.
      }
      if (peer.direct && options_.stripes > 0) {
        if (!stripes_out_)
          stripes_out_ = std::make_unique<StripeSenders>(options_.stripes, [this](int p) { peers_[p]->direct_broken = true; });
        stripes_out_->connect(r, a.direct, rank(), deadline);  // false: its large frames take ZeroMQ
      }
    }
    send_control_locked(peer, FrameKind::hello);
  }
  connected_ = true;
  wake();  // the I/O thread starts polling the monitors and sending heartbeats

  std::unique_lock lock(mutex_);
  auto all_heard = [&] {
    for (int r = 0; r < world_size(); ++r)
      if (r != rank() && !peers_[r]->hello) return false;
    return true;
  };
  hello_cv_.wait_until(lock, deadline, [&] { return broken_ || all_heard(); });
  if (broken_) std::rethrow_exception(broken_);
  if (!all_heard()) {
    std::string missing;
    for (int r = 0; r < world_size(); ++r)
      if (r != rank() && !peers_[r]->hello) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    throw TimeoutError("init_process_group: rank " + std::to_string(rank()) + " heard no hello from rank(s) " +
                       missing + " (not started, unreachable, or holding a different CURVE key)");
  }
  lock.unlock();
  const char* trace = std::getenv("TROUPE_TRACE");
  if (trace && *trace) sync_trace_clock(deadline);
}

void Transport::sync_trace_clock(Deadline deadline) {
  // Each rank in turn pings rank 0; rank 0 answers with its clock. The round trip that took
  // least bounds the offset's error by half of it: the answer was stamped somewhere inside it.
  constexpr uint64_t kClockGroup = 0x7472616365636c6bULL;  // "traceclk": no process group's id
  constexpr int kRounds = 200;  // more tries at a round trip the scheduler did not stretch
  auto now = [] { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); };
  FrameHeader h;
  h.group = kClockGroup;
  if (rank() == 0) {
    for (int r = 1; r < world_size(); ++r)
      for (int k = 0; k < kRounds; ++k) {
        if (!wait(post(kClockGroup, Lane::p2p, k, r), deadline))
          throw TimeoutError("TROUPE_TRACE: no clock ping from rank " + std::to_string(r));
        h.tag = k;
        send(r, h, Tensor::from_vector<int64_t>({now()}, {1}));
      }
    Profiler::set_job_clock(0, 0, 0);
    return;
  }
  int64_t best_rtt = -1, offset = 0;
  for (int k = 0; k < kRounds; ++k) {
    auto slot = post(kClockGroup, Lane::p2p, k, 0);
    h.tag = k;
    const int64_t sent = now();
    send(0, h, Tensor());
    std::optional<Message> m = wait(slot, deadline);
    const int64_t back = now();
    if (!m) throw TimeoutError("TROUPE_TRACE: no clock answer from rank 0");
    const int64_t rtt = back - sent;
    if (best_rtt < 0 || rtt < best_rtt) {
      best_rtt = rtt;
      offset = m->payload.to_vector<int64_t>()[0] - (sent + back) / 2;
    }
  }
  Profiler::set_job_clock(rank(), offset, (best_rtt + 1) / 2);
}

void Transport::send_control_locked(Peer& peer, FrameKind kind) {
  FrameHeader h;
  h.kind = kind;
  h.source = rank();
  h.dtype = DType::u8;
  h.shape = {0};
  h.seq = peer.next_seq++;
  uint8_t buffer[128];
  encode_header_into(h, buffer);
  zmq_send(peer.dealer, buffer, header_size(1), ZMQ_DONTWAIT);
}

void Transport::send(int dst, FrameHeader h, const Tensor& payload, const std::shared_ptr<detail::Completion>& done) {
  if (dst < 0 || dst >= world_size())
    throw IndexError("send: destination rank " + std::to_string(dst) + " outside a world of " +
                     std::to_string(world_size()));
  check_healthy();
  Tensor host;
  if (payload.defined()) {
    host = host_contiguous(payload);
    h.dtype = host.dtype();
    h.shape = host.shape();
    h.payload_bytes = host.nbytes();
  } else {
    h.dtype = DType::u8;
    h.shape = {0};
    h.payload_bytes = 0;
  }
  if (h.shape.size() > kMaxFrameDims)
    throw ShapeError("send: cannot send " + host.meta().str() + ": at most " + std::to_string(kMaxFrameDims) +
                     " dims");
  h.source = rank();
  if (dst == rank()) {
    {
      std::lock_guard lock(mutex_);
      deliver(Message{rank(), std::move(h), host, {}});
    }
    if (done) done->finish();
    return;
  }
  check_peer(dst);
  Peer& peer = *peers_[dst];
  if (!peer.dealer) throw CommError("send: the transport is not connected yet");
  // A send that finishes later (zero-copy or striped) fails at once if the transport breaks.
  const bool zero_copy = h.payload_bytes > kCopyBelow;
  if (zero_copy && done) {
    std::lock_guard lock(mutex_);
    if (pending_sends_.size() > 64)
      std::erase_if(pending_sends_, [](const auto& w) {
        auto c = w.lock();
        return !c || c->is_done();
      });
    pending_sends_.push_back(done);
  }
  {
    std::lock_guard lock(peer.send_mutex);
    h.seq = peer.next_seq;
    const std::span<const uint8_t> bytes(static_cast<const uint8_t*>(host.defined() ? host.raw_data() : nullptr),
                                         h.payload_bytes);
    const std::span<const uint8_t> parts[] = {bytes};
    const auto payload_parts = std::span(parts, h.payload_bytes > 0 ? 1 : 0);
    if (send_direct_locked(peer, h, payload_parts)) {
      peer.count_sent(direct_path, header_size(h.shape.size()) + h.payload_bytes);
      ++peer.next_seq;
      touch();
      if (done) done->finish();
      return;
    }
    if (takes_stripes(dst, payload_parts)) {
      peer.count_sent(stripes_path, header_size(h.shape.size()) + h.payload_bytes);
      send_striped_locked(dst, h, payload_parts, std::make_shared<Tensor>(host), done);
      ++peer.next_seq;
      touch();
      return;
    }
  }

  std::lock_guard lock(peer.send_mutex);
  h.seq = peer.next_seq++;
  zmq_msg_t header_msg;
  zmq_msg_init_size(&header_msg, header_size(h.shape.size()));
  encode_header_into(h, static_cast<uint8_t*>(zmq_msg_data(&header_msg)));
  const bool has_payload = h.payload_bytes > 0;
  if (!send_part(&header_msg, peer.dealer, has_payload ? ZMQ_SNDMORE : 0)) {
    zmq_msg_close(&header_msg);
    zmq_fail("send to rank " + std::to_string(dst));
  }
  if (has_payload) send_tensor_part(peer.dealer, host, 0, zero_copy ? done : nullptr, dst);
  peer.count_sent(zmq_path, header_size(h.shape.size()) + h.payload_bytes);
  touch();
  if (done && !zero_copy) done->finish();
}

void Transport::send_actor_frame(int dst, const std::vector<uint8_t>& call_frame, const std::vector<Tensor>& tensors) {
  if (dst < 0 || dst >= world_size() || dst == rank())
    throw IndexError("send: actor frame to rank " + std::to_string(dst) + " (world of " + std::to_string(world_size()) +
                     ", this is rank " + std::to_string(rank()) + ")");
  if (tensors.size() > kMaxActorParts)
    throw ValueError("send: " + std::to_string(tensors.size()) + " tensors in one actor call, at most " +
                     std::to_string(kMaxActorParts));
  Peer& peer = *peers_[dst];
  if (peer.lost) {
    std::lock_guard lock(mutex_);
    std::rethrow_exception(peer.lost_error);
  }
  check_peer(dst);
  if (!peer.dealer) throw CommError("send: the transport is not connected yet");
  FrameHeader h;
  h.kind = FrameKind::actor;
  h.source = rank();
  h.dtype = DType::u8;
  h.shape = {static_cast<int64_t>(call_frame.size())};
  h.payload_bytes = call_frame.size();
  std::vector<Tensor> hosts;
  hosts.reserve(tensors.size());
  for (const Tensor& t : tensors) hosts.push_back(host_contiguous(t));
  std::lock_guard lock(peer.send_mutex);
  h.seq = peer.next_seq++;
  {
    std::vector<std::span<const uint8_t>> parts{{call_frame.data(), call_frame.size()}};
    for (const Tensor& t : hosts) parts.emplace_back(static_cast<const uint8_t*>(t.raw_data()), t.nbytes());
    const size_t frame_bytes = header_size(1) + parts_bytes(parts);
    if (send_direct_locked(peer, h, parts)) {
      peer.count_sent(direct_path, frame_bytes);
      touch();
      return;
    }
    if (takes_stripes(dst, parts)) {
      peer.count_sent(stripes_path, frame_bytes);
      // The stripes' threads write later: they keep a copy of the call frame and the tensors.
      auto kept = std::make_shared<std::pair<std::vector<uint8_t>, std::vector<Tensor>>>(call_frame, hosts);
      parts[0] = {kept->first.data(), kept->first.size()};
      send_striped_locked(dst, h, parts, std::move(kept), nullptr);
      touch();
      return;
    }
  }
  zmq_msg_t header_msg;
  zmq_msg_init_size(&header_msg, header_size(1));
  encode_header_into(h, static_cast<uint8_t*>(zmq_msg_data(&header_msg)));
  if (!send_part(&header_msg, peer.dealer, ZMQ_SNDMORE)) {
    zmq_msg_close(&header_msg);
    zmq_fail("send to rank " + std::to_string(dst));
  }
  zmq_msg_t call_msg;
  zmq_msg_init_size(&call_msg, call_frame.size());
  std::memcpy(zmq_msg_data(&call_msg), call_frame.data(), call_frame.size());
  if (!send_part(&call_msg, peer.dealer, tensors.empty() ? 0 : ZMQ_SNDMORE)) {
    zmq_msg_close(&call_msg);
    zmq_fail("send to rank " + std::to_string(dst));
  }
  size_t frame_bytes = header_size(1) + call_frame.size();
  for (size_t i = 0; i < hosts.size(); ++i) {
    send_tensor_part(peer.dealer, hosts[i], i + 1 < hosts.size() ? ZMQ_SNDMORE : 0, nullptr, dst);
    frame_bytes += hosts[i].nbytes();
  }
  peer.count_sent(zmq_path, frame_bytes);
  touch();
}

bool Transport::send_direct_locked(Peer& peer, const FrameHeader& h, std::span<const std::span<const uint8_t>> parts) {
  if (!peer.direct || peer.direct->broken() || parts.size() > kDirectPartsMax) return false;
  const size_t header_bytes = header_size(h.shape.size());
  if (DirectSender::record_bytes(header_bytes, parts) > options_.direct_max) return false;
  uint8_t header[512];
  encode_header_into(h, header);
  const bool backlogged = peer.direct->send({header, header_bytes}, parts);
  if (peer.direct->broken()) peer.direct_broken = true;
  if (backlogged && !peer.direct_backlogged.exchange(true)) wake();  // the I/O thread writes the rest
  return true;
}

bool Transport::takes_stripes(int dst, std::span<const std::span<const uint8_t>> parts) const {
  if (!stripes_out_ || parts.size() > kDirectPartsMax) return false;
  size_t bytes = 0;
  for (const auto& p : parts) bytes += p.size();
  return bytes >= options_.stripe_min && stripes_out_->usable(dst);
}

void Transport::send_striped_locked(int dst, const FrameHeader& h, std::span<const std::span<const uint8_t>> parts,
                                    std::shared_ptr<const void> keep, const std::shared_ptr<detail::Completion>& done) {
  uint8_t header[512];
  const size_t header_bytes = header_size(h.shape.size());
  encode_header_into(h, header);
  stripes_out_->send(dst, h.seq, {header, header_bytes}, parts, std::move(keep), done);
}

int Transport::direct_links() const {
  int links = 0;
  for (const auto& peer : peers_) links += peer->direct != nullptr;
  return links;
}

void Transport::set_actor_handler(std::shared_ptr<ActorHandler> handler) {
  // Holding the ROUTER, no frame is handled meanwhile: the backlog reaches the handler first.
  std::lock_guard router(router_mutex_);
  std::deque<Message> backlog;
  {
    std::lock_guard lock(mutex_);
    actor_handler_ = handler;
    actor_handler_set_ = true;
    backlog.swap(actor_backlog_);
  }
  if (!handler) return;
  for (Message& m : backlog) {
    const int source = m.source;
    try {
      handler->on_frame(std::move(m));
    } catch (const CommError& e) {
      lose_peer(source, std::make_exception_ptr(
                            CommError("transport: rank " + std::to_string(source) + " sent a bad frame: " + e.what())));
    }
  }
}

std::shared_ptr<Transport::Slot> Transport::post(uint64_t group, Lane lane, int64_t tag, int source) {
  auto slot = std::make_shared<Slot>();
  slot->key = {group, lane, tag};
  slot->source = source;
  std::lock_guard lock(mutex_);
  // Messages that already arrived are delivered even after a failure: they are complete.
  if (auto it = unexpected_.find(slot->key); it != unexpected_.end()) {
    auto& queue = it->second;
    // A collective's abort notice wins over its data that came earlier: once any rank gave up on
    // the collective, no later receive of it may succeed.
    auto m = std::find_if(queue.begin(), queue.end(), [](const Message& q) { return q.header.kind == FrameKind::control; });
    if (m == queue.end())
      m = std::find_if(queue.begin(), queue.end(), [&](const Message& q) { return source < 0 || q.source == source; });
    if (m != queue.end()) {
      slot->message = std::move(*m);
      queue.erase(m);
      if (queue.empty()) unexpected_.erase(it);
      slot->finish();
      return slot;
    }
  }
  if (broken_) {
    slot->error = broken_;
    slot->finish();
  } else if (source >= 0 && source != rank() && peers_[source]->departed) {
    slot->error = std::make_exception_ptr(
        PeerLostError("recv: rank " + std::to_string(source) + " has shut down (it said goodbye)"));
    slot->finish();
  } else {
    posted_[slot->key].push_back(slot);
  }
  return slot;
}

void Transport::lead_locked(const std::function<bool()>& done, Deadline deadline) {
  const Deadline slice = std::min(deadline, Clock::now() + kLeadSlice);
  std::vector<pollfd> fds;
  while (true) {
    if (handle_router() + handle_direct() > 0) touch();
    const auto now = Clock::now();
    last_lead_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    if (done()) break;
    const Deadline spin_until = Clock::time_point(Clock::duration(last_activity_.load(std::memory_order_relaxed))) +
                                options_.busy_poll;
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(slice - now).count();
    if (left <= 0) break;
    if (now < spin_until) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    fds.assign(1, pollfd{router_fd_, POLLIN, 0});
    for (const auto& in : inbound_) fds.push_back(pollfd{in->fd(), POLLIN, 0});
    if (striped_ready_fd_ >= 0) fds.push_back(pollfd{striped_ready_fd_, POLLIN, 0});
    const timespec ts{left / 1000000000, left % 1000000000};
    ::ppoll(fds.data(), fds.size(), &ts, nullptr);
  }
}

bool Transport::try_drive(const std::function<bool()>& done, Deadline deadline) {
  std::unique_lock router(router_mutex_, std::try_to_lock);
  if (!router.owns_lock()) return false;
  lead_locked(done, deadline);
  return true;
}

void Transport::drive(const std::function<bool()>& done, Deadline deadline) {
  while (!done() && Clock::now() < deadline) {
    std::lock_guard router(router_mutex_);
    lead_locked(done, deadline);
  }
}

void Transport::touch() { last_activity_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed); }

std::optional<Message> Transport::wait(const std::shared_ptr<Slot>& slot, Deadline deadline) {
  // Leader/followers: the first waiter takes the ROUTER (and the direct links) and receives for
  // everyone, woken by their descriptors, so a small message costs no hand-off through a thread. The
  // others sleep on their slot; the leader (or the I/O thread) completes it.
  const auto ready = [&] { return slot->ready.load(std::memory_order_acquire); };
  while (!ready() && Clock::now() < deadline) {
    if (!try_drive(ready, deadline)) {
      std::unique_lock lock(mutex_);
      slot->cv.wait_until(lock, std::min(deadline, Clock::now() + kLeadSlice), [&] { return slot->done; });
    }
  }
  std::unique_lock lock(mutex_);
  // A deadline that has passed is only checked: a timed wait on it still costs a timer and a
  // reschedule (~100 us in a VM), and polling with wait(slot, now) is common.
  const bool done = Clock::now() >= deadline ? slot->done : slot->cv.wait_until(lock, deadline, [&] { return slot->done; });
  if (!done) {
    if (auto it = posted_.find(slot->key); it != posted_.end()) {
      std::erase(it->second, slot);
      if (it->second.empty()) posted_.erase(it);
    }
    return std::nullopt;
  }
  if (slot->error) std::rethrow_exception(slot->error);
  std::optional<Message> message = std::move(slot->message);
  slot->message.reset();
  return message;
}

bool Transport::is_local(int r) const { return r == rank() || peers_[r]->local; }

const std::string& Transport::host_id_of(int r) const {
  return r == rank() ? address_.host_id : host_ids_.at(static_cast<size_t>(r));
}

bool Transport::is_ready(const Slot& slot) {
  std::lock_guard lock(mutex_);
  return slot.done;
}

void Transport::check_healthy() {
  std::lock_guard lock(mutex_);
  if (broken_) std::rethrow_exception(broken_);
}

void Transport::check_peer(int r) {
  if (r != rank() && peers_[r]->departed)
    throw PeerLostError("rank " + std::to_string(r) + " has shut down (it said goodbye)");
}

void Transport::deliver(Message message) {
  const Key key{message.header.group, lane_of(message.header.kind), message.header.tag};
  if (auto it = posted_.find(key); it != posted_.end()) {
    auto& queue = it->second;
    // A collective's abort notice goes to whichever receive of that collective is waiting.
    const bool any_receiver = message.header.kind == FrameKind::control;
    for (auto s = queue.begin(); s != queue.end(); ++s) {
      if (!any_receiver && (*s)->source >= 0 && (*s)->source != message.source) continue;
      std::shared_ptr<Slot> slot = *s;
      queue.erase(s);
      if (queue.empty()) posted_.erase(it);
      slot->message = std::move(message);
      slot->finish();
      slot->cv.notify_all();
      return;
    }
  }
  unexpected_[key].push_back(std::move(message));
}

void Transport::break_transport(std::exception_ptr error) {
  std::vector<std::weak_ptr<detail::Completion>> sends;
  {
    std::lock_guard lock(mutex_);
    if (broken_) return;
    broken_ = error;
    for (auto& [key, queue] : posted_)
      for (auto& slot : queue) {
        slot->error = error;
        slot->finish();
        slot->cv.notify_all();
      }
    posted_.clear();
    sends.swap(pending_sends_);
  }
  hello_cv_.notify_all();
  for (auto& weak : sends)
    if (auto done = weak.lock()) done->finish(error);
}

void Transport::lose_peer(int r, std::exception_ptr error) {
  Peer& peer = *peers_[r];
  {
    std::lock_guard lock(mutex_);
    if (peer.lost) return;
    peer.lost_error = error;
    peer.lost = true;
  }
  break_transport(error);
  tell_actor_handler(r, error);
}

void Transport::tell_actor_handler(int r, std::exception_ptr error) {
  std::shared_ptr<ActorHandler> handler;
  {
    std::lock_guard lock(mutex_);
    handler = actor_handler_;
  }
  if (handler) handler->on_peer_lost(r, error);
}

bool Transport::is_gone(int r) const { return r != rank() && (peers_[r]->lost || peers_[r]->departed); }

void Transport::peer_departed(int r) {
  peers_[r]->departed = true;
  auto error = std::make_exception_ptr(
      PeerLostError("rank " + std::to_string(r) + " has shut down (it said goodbye)"));
  {
    std::lock_guard lock(mutex_);
    for (auto it = posted_.begin(); it != posted_.end();) {
      std::erase_if(it->second, [&](const std::shared_ptr<Slot>& slot) {
        if (slot->source != r) return false;
        slot->error = error;
        slot->finish();
        slot->cv.notify_all();
        return true;
      });
      it = it->second.empty() ? posted_.erase(it) : std::next(it);
    }
  }
  hello_cv_.notify_all();
  tell_actor_handler(r, error);
}

void Transport::io_loop() {
  std::vector<zmq_pollitem_t> items;
  std::vector<int> monitor_peer;  // items[first_monitor + i] watches peer monitor_peer[i]
  const size_t first_monitor = zap_ ? 3 : 2;
  bool monitoring = false;
  auto rebuild = [&] {
    items = {{nullptr, router_fd_, ZMQ_POLLIN, 0}, {wake_rx_, 0, ZMQ_POLLIN, 0}};
    if (zap_) items.push_back({zap_, 0, ZMQ_POLLIN, 0});
    monitor_peer.clear();
    for (int r = 0; r < world_size(); ++r)
      if (monitoring && peers_[r]->monitor) {
        items.push_back({peers_[r]->monitor, 0, ZMQ_POLLIN, 0});
        monitor_peer.push_back(r);
      }
  };
  rebuild();
  const size_t fixed_items = items.size();
  bool router_led = false;
  std::vector<int> inbound_fds;  // as of the last turn that held the ROUTER
  std::vector<int> backlogged;   // peers whose direct link keeps bytes, items after the inbound ones
  auto next_tick = Clock::now() + options_.heartbeat_interval;
  while (true) {
    if (!monitoring && connected_) {
      monitoring = true;
      const auto now = Clock::now();
      for (auto& peer : peers_) peer->last_seen = now.time_since_epoch().count();
      rebuild();
    }
    // Direct links: new connections, the inbound ones (read here only when nobody leads: they are
    // level-triggered), and the outbound ones that keep bytes the socket did not take yet.
    items.resize(fixed_items);
    if (listener_) items.push_back({nullptr, listener_->fd(), ZMQ_POLLIN, 0});
    if (!router_led)
      for (int fd : inbound_fds) items.push_back({nullptr, fd, ZMQ_POLLIN, 0});
    backlogged.clear();
    for (int r = 0; r < world_size(); ++r)
      if (peers_[r]->direct_backlogged.load()) {
        backlogged.push_back(r);
        items.push_back({nullptr, peers_[r]->direct->fd(), ZMQ_POLLOUT, 0});
      }
    // While a waiting thread leads (holds the ROUTER, or held it a moment ago and will again: a
    // waiter leads in slices), leave the ROUTER to it and look back soon. Racing it for a frame
    // would cost the waiter a wake-up.
    items[0].events = router_led ? 0 : ZMQ_POLLIN;
    auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(next_tick - Clock::now()).count();
    if (router_led) wait_ms = std::min<long>(wait_ms, 1);
    const int rc = zmq_poll(items.data(), static_cast<int>(items.size()), std::max<long>(0, wait_ms));
    if (rc < 0 && zmq_errno() != EINTR) break;
    if (listener_ && (items[fixed_items].revents & ZMQ_POLLIN)) {
      std::lock_guard lock(accepted_mutex_);
      for (int fd = listener_->accept(); fd >= 0; fd = listener_->accept()) accepted_.push_back(fd);
    }
    for (size_t i = 0; i < backlogged.size(); ++i) {
      Peer& peer = *peers_[backlogged[i]];
      std::lock_guard lock(peer.send_mutex);
      const bool still = peer.direct->flush();
      if (peer.direct->broken()) peer.direct_broken = true;
      peer.direct_backlogged = still;
    }
    // The ROUTER's descriptor is edge-like: drain on every turn, not only when it fired.
    if (Clock::now() - Clock::time_point(Clock::duration(last_lead_.load())) >= kLeadSlice) {
      std::unique_lock router(router_mutex_, std::try_to_lock);
      router_led = !router.owns_lock();
      if (router.owns_lock()) {
        handle_router();
        handle_direct();
        inbound_fds.clear();
        for (const auto& in : inbound_) inbound_fds.push_back(in->fd());
        if (striped_ready_fd_ >= 0) inbound_fds.push_back(striped_ready_fd_);
      }
    } else {
      router_led = true;
    }
    if (rc > 0) {
      if (items[1].revents & ZMQ_POLLIN) {
        char byte;
        while (zmq_recv(wake_rx_, &byte, 1, ZMQ_DONTWAIT) >= 0) {
        }
      }
      if (zap_ && (items[2].revents & ZMQ_POLLIN)) handle_zap();
      for (size_t i = 0; i < monitor_peer.size(); ++i)
        if (items[first_monitor + i].revents & ZMQ_POLLIN) handle_monitor(monitor_peer[i]);
    }
    if (stopping_) break;
    const auto now = Clock::now();
    if (now >= next_tick) {
      tick(now);
      next_tick = now + options_.heartbeat_interval;
    }
  }
  zmq_close(router_);
  for (auto& peer : peers_)
    if (peer->monitor) zmq_close(peer->monitor);
  inbound_.clear();
  for (int fd : accepted_) ::close(fd);
  if (zap_) zmq_close(zap_);
  zmq_close(wake_rx_);
}

int Transport::handle_router() {
  int handled = 0;
  while (true) {
    // A frame is [routing id, header] or [routing id, header, payload]; multipart messages arrive
    // whole, so once the first part is here the rest are too.
    zmq_msg_t parts[3];
    for (auto& p : parts) zmq_msg_init(&p);
    auto close_all = [&] {
      for (auto& p : parts) zmq_msg_close(&p);
    };
    int count = 0;
    bool too_many = false, more = true;
    std::vector<Tensor> extra;  // an actor frame's tensors
    while (more) {
      zmq_msg_t part;
      zmq_msg_init(&part);
      zmq_msg_t* target = count < 3 ? &parts[count] : &part;
      if (zmq_msg_recv(target, router_, count == 0 ? ZMQ_DONTWAIT : 0) < 0) {
        zmq_msg_close(&part);
        if (count == 0) {
          close_all();
          return handled;
        }
        break;
      }
      more = zmq_msg_more(target);
      if (count < 3) ++count;
      else if (extra.size() < kMaxActorParts) extra.push_back(adopt_payload(&part, DType::u8, {int64_t(zmq_msg_size(&part))}));
      else too_many = true;
      zmq_msg_close(&part);
    }
    const int peer = rank_of_routing_id(&parts[0], world_size());
    if (peer < 0 || peer == rank()) {
      ++dropped_frames_;  // not one of our ranks (with CURVE, nobody unauthenticated gets here)
      close_all();
      continue;
    }
    try {
      if (count < 2 || too_many) throw CommError("frame: malformed: wrong number of message parts");
      const size_t payload_size = count == 3 ? zmq_msg_size(&parts[2]) : 0;
      FrameHeader h = decode_header(zmq_msg_data(&parts[1]), zmq_msg_size(&parts[1]), payload_size, world_size());
      if (h.source != peer)
        throw CommError("frame: malformed: claims source rank " + std::to_string(h.source));
      if (!extra.empty() && h.kind != FrameKind::actor)
        throw CommError("frame: malformed: " + std::to_string(count + extra.size()) + " message parts");
      size_t frame_bytes = zmq_msg_size(&parts[1]) + payload_size;
      for (const Tensor& t : extra) frame_bytes += t.nbytes();
      peers_[peer]->count_received(zmq_path, frame_bytes);
      Tensor payload = adopt_payload(&parts[2], h.dtype, h.shape);
      take_frame(peer, std::move(h), std::move(payload), std::move(extra));
      ++handled;
    } catch (const CommError& e) {
      lose_peer(peer, std::make_exception_ptr(
                          CommError("transport: rank " + std::to_string(peer) + " sent a bad frame: " + e.what())));
    }
    close_all();
  }
}

int Transport::handle_direct() {
  {
    std::lock_guard lock(accepted_mutex_);
    for (int fd : accepted_) inbound_.push_back(std::make_unique<DirectReceiver>(fd, rank(), world_size()));
    accepted_.clear();
  }
  int handled = handle_striped();
  for (auto it = inbound_.begin(); it != inbound_.end();) {
    DirectReceiver& in = **it;
    bool open = true;
    try {
      open = in.read([&](const DirectRecord& record) {
        const size_t payload_size = record.parts.empty() ? 0 : record.parts[0].size();
        FrameHeader h = decode_header(record.header.data(), record.header.size(), payload_size, world_size());
        if (h.source != in.peer()) throw CommError("frame: malformed: claims source rank " + std::to_string(h.source));
        if (record.parts.size() > 1 && h.kind != FrameKind::actor)
          throw CommError("frame: malformed: " + std::to_string(record.parts.size()) + " parts");
        Tensor payload = Tensor::empty(h.shape, h.dtype);
        if (payload_size > 0) std::memcpy(payload.mutable_raw_data(), record.parts[0].data(), payload_size);
        std::vector<Tensor> extra;
        for (size_t i = 1; i < record.parts.size(); ++i) {
          extra.push_back(Tensor::empty({static_cast<int64_t>(record.parts[i].size())}, DType::u8));
          std::memcpy(extra.back().mutable_raw_data(), record.parts[i].data(), record.parts[i].size());
        }
        ++handled;
        ++direct_frames_;
        peers_[in.peer()]->count_received(direct_path, record.header.size() + parts_bytes(record.parts));
        take_frame(in.peer(), std::move(h), std::move(payload), std::move(extra));
      });
    } catch (const CommError& e) {
      open = false;
      if (in.peer() >= 0)
        lose_peer(in.peer(), std::make_exception_ptr(CommError("transport: rank " + std::to_string(in.peer()) +
                                                               " sent a bad frame: " + e.what())));
      else
        ++dropped_frames_;  // a stranger's connection: closed, nothing else
    }
    if (open && in.lane() > 0) {  // a stripe: its own thread reads it from now on
      try {
        stripes_in_->adopt(in.release(), in.peer(), in.lane());
      } catch (const CommError& e) {
        lose_peer(in.peer(), std::make_exception_ptr(CommError("transport: rank " + std::to_string(in.peer()) +
                                                               " sent a bad frame: " + e.what())));
      }
      it = inbound_.erase(it);
      continue;
    }
    if (open) {
      ++it;
      continue;
    }
    // Closed: like ZeroMQ's disconnect, the peer is suspect until its goodbye comes (tick()).
    if (in.peer() >= 0) suspect_peer(in.peer());
    it = inbound_.erase(it);
  }
  return handled;
}

int Transport::handle_striped() {
  if (!stripes_in_) return 0;
  uint64_t signals;
  if (::read(striped_ready_fd_, &signals, sizeof signals) < 0) return 0;  // nothing whole yet
  int handled = 0;
  for (StripedFrame& f : stripes_in_->take_ready()) {
    try {
      const auto [payload_at, payload_size] = f.parts.front();
      FrameHeader h = decode_header(f.header.data(), f.header.size(), payload_size, world_size());
      if (h.source != f.peer) throw CommError("frame: malformed: claims source rank " + std::to_string(h.source));
      if (f.parts.size() > 1 && h.kind != FrameKind::actor)
        throw CommError("frame: malformed: " + std::to_string(f.parts.size()) + " parts");
      // The parts are views of the block: every part starts 64-byte aligned (stripes.h).
      Tensor payload(f.block, h.dtype, h.shape, contiguous_strides(h.shape),
                     static_cast<int64_t>(payload_at / itemsize(h.dtype)));
      std::vector<Tensor> extra;
      for (size_t i = 1; i < f.parts.size(); ++i)
        extra.emplace_back(f.block, DType::u8, Shape{static_cast<int64_t>(f.parts[i].second)},
                           Strides{1}, static_cast<int64_t>(f.parts[i].first));
      ++handled;
      ++striped_frames_;
      size_t frame_bytes = f.header.size();
      for (const auto& part : f.parts) frame_bytes += part.second;
      peers_[f.peer]->count_received(stripes_path, frame_bytes);
      take_frame(f.peer, std::move(h), std::move(payload), std::move(extra));
    } catch (const CommError& e) {
      lose_peer(f.peer, std::make_exception_ptr(
                            CommError("transport: rank " + std::to_string(f.peer) + " sent a bad frame: " + e.what())));
    }
  }
  return handled;
}

void Transport::suspect_peer(int r) {
  Peer& peer = *peers_[r];
  std::lock_guard lock(mutex_);
  if (peer.hello && !peer.departed && !peer.suspect) {
    peer.suspect = true;
    peer.suspect_since = Clock::now();
  }
}

void Transport::take_frame(int r, FrameHeader h, Tensor payload, std::vector<Tensor> extra) {
  Peer& peer = *peers_[r];
  peer.last_seen = Clock::now().time_since_epoch().count();
  if (h.seq != peer.expected_seq) {
    // Came ahead of a frame sent before it on the other path: held until that one is here.
    if (h.seq < peer.expected_seq || peer.held.count(h.seq) || peer.held.size() >= kMaxHeldFrames)
      throw CommError("frame: sequence number " + std::to_string(h.seq) + ", expected " +
                      std::to_string(peer.expected_seq) + " (a frame was lost or repeated)");
    peer.held.emplace(h.seq, Peer::Held{std::move(h), std::move(payload), std::move(extra)});
    return;
  }
  ++peer.expected_seq;
  handle_frame(r, std::move(h), std::move(payload), std::move(extra));
  for (auto it = peer.held.begin(); it != peer.held.end() && it->first == peer.expected_seq; it = peer.held.begin()) {
    Peer::Held next = std::move(it->second);
    peer.held.erase(it);
    ++peer.expected_seq;
    handle_frame(r, std::move(next.header), std::move(next.payload), std::move(next.extra));
  }
}

void Transport::handle_frame(int r, FrameHeader h, Tensor payload, std::vector<Tensor> extra) {
  Peer& peer = *peers_[r];
  switch (h.kind) {
    case FrameKind::heartbeat:
      return;
    case FrameKind::hello: {
      std::lock_guard lock(mutex_);
      peer.hello = true;
      peer.suspect = false;
      hello_cv_.notify_all();
      return;
    }
    case FrameKind::goodbye:
      peer_departed(r);
      return;
    case FrameKind::actor: {
      if (peer.lost) return;
      Message m{r, h, std::move(payload), std::move(extra)};
      std::shared_ptr<ActorHandler> handler;
      {
        std::lock_guard lock(mutex_);
        if (!actor_handler_) {
          if (!actor_handler_set_) actor_backlog_.push_back(std::move(m));
          return;
        }
        handler = actor_handler_;
      }
      handler->on_frame(std::move(m));
      return;
    }
    case FrameKind::data:
    case FrameKind::collective:
    case FrameKind::control: {
      std::lock_guard lock(mutex_);
      deliver(Message{r, std::move(h), std::move(payload), {}});
      return;
    }
  }
}

void Transport::handle_monitor(int r) {
  zmq_msg_t event, endpoint;
  zmq_msg_init(&event);
  zmq_msg_init(&endpoint);
  if (zmq_msg_recv(&event, peers_[r]->monitor, ZMQ_DONTWAIT) >= 0) {
    if (zmq_msg_more(&event)) zmq_msg_recv(&endpoint, peers_[r]->monitor, 0);
    uint16_t id = 0;
    if (zmq_msg_size(&event) >= 2) std::memcpy(&id, zmq_msg_data(&event), 2);
    Peer& peer = *peers_[r];
    std::lock_guard lock(mutex_);
    if (id == ZMQ_EVENT_DISCONNECTED && peer.hello && !peer.departed && !peer.suspect) {
      peer.suspect = true;
      peer.suspect_since = Clock::now();
    }
  }
  zmq_msg_close(&event);
  zmq_msg_close(&endpoint);
}

void Transport::handle_zap() {
  // ZAP request: version, request id, domain, address, identity, mechanism, credentials...
  std::vector<std::string> parts;
  while (true) {
    zmq_msg_t part;
    zmq_msg_init(&part);
    if (zmq_msg_recv(&part, zap_, parts.empty() ? ZMQ_DONTWAIT : 0) < 0) {
      zmq_msg_close(&part);
      if (parts.empty()) return;
      break;
    }
    parts.emplace_back(static_cast<const char*>(zmq_msg_data(&part)), zmq_msg_size(&part));
    const bool more = zmq_msg_more(&part);
    zmq_msg_close(&part);
    if (!more) break;
  }
  bool allowed = false;
  if (parts.size() >= 7 && parts[5] == "CURVE" && parts[6].size() == 32) {
    uint8_t expected[32];
    zmq_z85_decode(expected, options_.curve->public_key.c_str());
    allowed = std::memcmp(expected, parts[6].data(), 32) == 0;
  }
  const std::string request_id = parts.size() > 1 ? parts[1] : "";
  const std::string reply[] = {"1.0", request_id, allowed ? "200" : "400", allowed ? "OK" : "not this job's key", "", ""};
  for (size_t i = 0; i < 6; ++i) zmq_send(zap_, reply[i].data(), reply[i].size(), i < 5 ? ZMQ_SNDMORE : 0);
}

void Transport::tick(Clock::time_point now) {
  if (!connected_) return;
  for (int r = 0; r < world_size(); ++r) {
    Peer& peer = *peers_[r];
    if (r == rank() || peer.departed) continue;
    {
      std::lock_guard lock(peer.send_mutex);
      send_control_locked(peer, FrameKind::heartbeat);
    }
    bool hello, suspect;
    Clock::time_point suspect_since;
    {
      std::lock_guard lock(mutex_);
      if (peer.lost) continue;
      if (peer.direct_broken && peer.hello && !peer.suspect) {  // like a closed connection
        peer.suspect = true;
        peer.suspect_since = now;
      }
      hello = peer.hello;
      suspect = peer.suspect;
      suspect_since = peer.suspect_since;
    }
    if (!hello) continue;
    const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(
        now - Clock::time_point(Clock::duration(peer.last_seen.load())));
    if (silent > options_.peer_timeout)
      lose_peer(r, std::make_exception_ptr(PeerLostError(
          "rank " + std::to_string(r) + " was lost: no message or heartbeat for " + std::to_string(silent.count()) +
          " ms")));
    else if (suspect && now - suspect_since > kDisconnectGrace)
      lose_peer(r, std::make_exception_ptr(
          PeerLostError("rank " + std::to_string(r) + " was lost: its connection closed (process died or network broke)")));
  }
}

}  // namespace troupe::net
