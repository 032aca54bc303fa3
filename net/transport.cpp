#include "net/transport.h"

#include <malloc.h>
#include <sched.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cstdlib>

#include "actors/observe/metrics_server.h"
#include "actors/observe/profiler.h"
#include "actors/runtime.h"
#include "devices/threads.h"
#include "net/errors.h"
#include "net/transport_internal.h"
#include "net/trace_clock.h"
#include "net/zmq_socket.h"

namespace troupe::net {

namespace {
// The boot id, a host id's first field, names the machine (all its network namespaces).
std::string machine_of(const std::string& host_id) { return host_id.substr(0, host_id.find('/')); }
}  // namespace

std::chrono::microseconds busy_poll_for(int ranks_on_machine, int cpus) {
  return ranks_on_machine > cpus ? std::chrono::microseconds(0) : std::chrono::microseconds(50);
}

std::chrono::microseconds small_collective_poll_for(int ranks_on_machine, int cpus) {
  return ranks_on_machine > cpus ? std::chrono::microseconds(0) : std::chrono::microseconds(10000);
}

Transport::Transport(TransportOptions options)
    : options_(std::move(options)),
      live_(options_.rank, options_.world_size, options_.peer_timeout),
      staged_(options_.rank, options_.world_size) {
  // ZeroMQ mallocs every received message. glibc would serve big ones with fresh mmaps and trim
  // freed heap back to the kernel, so every 1 MiB chunk of a collective would page-fault in anew
  // (slow here: freed pages go back to the hypervisor). Keep them in the heap instead.
  static std::once_flag malloc_tuned;
  std::call_once(malloc_tuned, [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
  });
  if (options_.busy_poll) busy_poll_us_ = options_.busy_poll->count();
  if (options_.small_collective_poll) small_collective_poll_us_ = options_.small_collective_poll->count();
  if (options_.world_size < 1 || options_.rank < 0 || options_.rank >= options_.world_size)
    throw ValueError("transport: rank " + std::to_string(options_.rank) + " outside a world of " +
                     std::to_string(options_.world_size));
  for (int r = 0; r < options_.world_size; ++r) peers_.push_back(std::make_unique<Peer>());
  metrics::serve_from_env();
  Profiler::start_job_trace_from_env();
  context_ = zmq_ctx_new();
  if (!context_) zmq_fail("zmq_ctx_new");
  zmq_ctx_set(context_, ZMQ_BLOCKY, 0);
  FrameSink& sink = *this;
  try {
    zmq_ = std::make_unique<ZmqLink>(context_, options_, address_, sink);
    if (address_.tcp.empty() && address_.ipc.empty()) throw ValueError("transport: neither tcp nor ipc enabled");
    address_.host_id = host_id();
    if (!options_.tcp_host.empty() && options_.direct_max > 0) {
      DirectLink::Hooks hooks;
      hooks.send_mutex = [this](int r) -> std::mutex& { return peers_[r]->send_mutex; };
      hooks.wake = [this] { wake(); };
      hooks.turns_soon = [this] {
        return io_turns_soon_.load(std::memory_order_relaxed) &&
               Clock::now() - Clock::time_point(Clock::duration(last_lead_.load(std::memory_order_relaxed))) <
                   kLeadSlice;
      };
      hooks.on_stripe = [this](int fd, int peer, int stripe, const std::optional<SessionKeys>& session) {
        stripes_->adopt(fd, peer, stripe, session);
      };
      direct_ = std::make_unique<DirectLink>(options_, address_, sink, std::move(hooks));
      stripes_ = std::make_unique<StripeLink>(options_, sink);
    }

    const std::string wake_endpoint = "inproc://troupe-wake";
    wake_rx_ = zmq_socket(context_, ZMQ_PAIR);
    set_int(wake_rx_, ZMQ_LINGER, 0);
    if (zmq_bind(wake_rx_, wake_endpoint.c_str()) != 0) zmq_fail("bind wake socket");
    wake_tx_ = zmq_socket(context_, ZMQ_PAIR);
    set_int(wake_tx_, ZMQ_LINGER, 0);
    if (zmq_connect(wake_tx_, wake_endpoint.c_str()) != 0) zmq_fail("connect wake socket");
  } catch (...) {
    stripes_.reset();
    direct_.reset();
    zmq_.reset();
    for (void* s : {wake_rx_, wake_tx_})
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
    if (direct_)
      for (int r = 0; r < world_size(); ++r) {
        Peer& peer = *peers_[r];
        std::lock_guard lock(peer.send_mutex);
        if (r != rank() && !live_.gone(r)) direct_->flush_until(r, linger);
      }
    if (stripes_) stripes_->flush_until(linger);
    for (int r = 0; r < world_size(); ++r) {
      Peer& peer = *peers_[r];
      if (r == rank() || live_.departed(r)) continue;
      std::lock_guard lock(peer.send_mutex);
      send_control_locked(r, FrameKind::goodbye);
    }
    // Peers ending at the same time say goodbye too; who did need not be waited for on close.
    std::unique_lock lock(mutex_);
    hello_cv_.wait_for(lock, kGoodbyeWait, [&] {
      for (int r = 0; r < world_size(); ++r)
        if (r != rank() && !live_.gone(r)) return false;
      return true;
    });
  }
  stopping_ = true;
  wake();
  io_thread_.join();
  stripes_.reset();
  direct_.reset();
  for (int r = 0; r < world_size(); ++r) {
    // Flush what we sent to live peers, also after another rank was lost (remote actors on the
    // survivors still talk); drop what is queued for the gone and the never heard from.
    zmq_->close_dealer(r, live_.gone(r) || !live_.said_hello(r) ? 0 : kLingerMs);
  }
  zmq_.reset();
  zmq_close(wake_tx_);
  zmq_ctx_term(context_);
}

void Transport::wake() {
  std::lock_guard lock(wake_mutex_);
  zmq_send(wake_tx_, "", 0, ZMQ_DONTWAIT);
}

void Transport::spread_over_machine() {
  int index = 0, on_machine = 0;
  const std::string machine = machine_of(address_.host_id);
  for (int r = 0; r < world_size(); ++r) {
    if (r != rank() && machine_of(host_ids_[static_cast<size_t>(r)]) != machine) continue;
    if (r < rank()) ++index;
    ++on_machine;
  }
  cpu_set_t allowed;
  if (on_machine < 2 || busy_poll().count() == 0 || ::sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  if (on_machine > CPU_COUNT(&allowed)) return;  // they share CPUs anyway
  for (int c = 0, seen = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed) && seen++ == index) {
      home_cpu_ = c;
      break;
    }
  go_home();
}

void Transport::go_home() const {
  const int cpu = home_cpu_.load(std::memory_order_relaxed);
  if (cpu < 0 || ::sched_getcpu() == cpu) return;
  cpu_set_t allowed, home;
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0 || !CPU_ISSET(cpu, &allowed)) return;
  CPU_ZERO(&home);
  CPU_SET(cpu, &home);
  // Pinning moves the thread now; its own mask back leaves it there, free to move later.
  if (::sched_setaffinity(0, sizeof home, &home) == 0) ::sched_setaffinity(0, sizeof allowed, &allowed);
}

void Transport::touch() { last_activity_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed); }

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
    if (same_host && options_.shared_memory && !same_process(a, address_)) staged_.enable(r);
    std::string endpoint;
    if (options_.prefer == "ipc") endpoint = a.ipc;
    else if (options_.prefer == "tcp") endpoint = a.tcp;
    else endpoint = same_host ? a.ipc : a.tcp;
    if (endpoint.empty())
      throw CommError("transport: rank " + std::to_string(r) + " has no " + options_.prefer +
                      " endpoint (it advertised '" + a.serialize() + "')");
    zmq_->connect(r, endpoint);
    Peer& peer = *peers_[r];
    std::lock_guard lock(peer.send_mutex);
    if (direct_ && !a.direct.empty()) {
      direct_->connect(r, a.direct, deadline);
      stripes_->connect(r, a.direct, deadline);
    }
    send_control_locked(r, FrameKind::hello);
  }
  // Ranks in other network namespaces of this machine count: they share its CPUs.
  const int on_this_machine = static_cast<int>(std::count_if(host_ids_.begin(), host_ids_.end(), [&](const std::string& id) {
    return machine_of(id) == machine_of(address_.host_id);
  }));
  note_ranks_on_machine(on_this_machine);  // a runtime started from now on sleeps its idle workers if crowded
  if (!options_.busy_poll) busy_poll_us_ = busy_poll_for(on_this_machine, hardware_cores()).count();
  // A busy-poll turned off (told 0) turns this one off too: that rank is not to spin.
  if (!options_.small_collective_poll)
    small_collective_poll_us_ =
        busy_poll().count() == 0 ? 0 : small_collective_poll_for(on_this_machine, hardware_cores()).count();
  spread_over_machine();
  connected_ = true;
  wake();  // the I/O thread starts polling the monitors and sending heartbeats

  std::unique_lock lock(mutex_);
  hello_cv_.wait_until(lock, deadline, [&] { return broken_ || live_.all_said_hello(); });
  if (broken_) std::rethrow_exception(broken_);
  if (!live_.all_said_hello()) {
    const std::string missing = live_.not_heard();
    throw TimeoutError("init_process_group: rank " + std::to_string(rank()) + " heard no hello from rank(s) " +
                       missing + " (not started, unreachable, or holding a different job secret)");
  }
  lock.unlock();
  // The links lower ranks dialed came before their hellos: answer on them from the first frame.
  const auto linked = [&] {
    for (int r = 0; r < rank(); ++r)
      if (direct_ && direct_->awaits_link(r)) return false;
    return true;
  };
  drive(linked, std::min(deadline, Clock::now() + kLinkWait));
  const char* trace = std::getenv("TROUPE_TRACE");
  if (trace && *trace) sync_trace_clock(*this, deadline);
}

void Transport::send(int dst, FrameHeader h, const Tensor& payload, const std::shared_ptr<detail::Completion>& done) {
  if (dst < 0 || dst >= world_size())
    throw IndexError("send: destination rank " + std::to_string(dst) + " outside a world of " +
                     std::to_string(world_size()));
  check_healthy();
  h.dtype = payload.defined() ? payload.dtype() : DType::u8;
  h.shape = payload.defined() ? payload.shape() : Shape{0};
  h.payload_bytes = payload.defined() ? payload.nbytes() : 0;
  if (h.shape.size() > kMaxFrameDims)
    throw ShapeError("send: cannot send " + payload.meta().str() + ": at most " + std::to_string(kMaxFrameDims) +
                     " dims");
  h.source = rank();
  if (dst == rank()) {
    // The receiver gets host bytes of its own, as from another rank.
    HostStaging staged = stage_to_host(payload);
    staged.synchronize("send to this rank");
    {
      std::lock_guard lock(mutex_);
      deliver(Message{rank(), std::move(h), staged.host, {}});
    }
    if (done) done->finish();
    return;
  }
  check_peer(dst);
  // A send that finishes later (zero-copy or striped) fails at once if the transport breaks.
  if (h.payload_bytes > kCopyBelow && done) {
    std::lock_guard lock(mutex_);
    if (pending_sends_.size() > 64)
      std::erase_if(pending_sends_, [](const auto& w) {
        auto c = w.lock();
        return !c || c->is_done();
      });
    pending_sends_.push_back(done);
  }
  send_frame(dst, h, {}, {&payload, h.payload_bytes > 0 ? 1u : 0u}, done);
}

bool Transport::send_staged(int dst, FrameHeader h, const Tensor& payload,
                            const std::shared_ptr<detail::Completion>& done) {
  if (dst < 0 || dst >= world_size() || dst == rank() || !staged_.applies(dst, payload)) return false;
  check_healthy();
  check_peer(dst);
  std::optional<Tensor> descriptor = staged_.describe(dst, payload);
  if (!descriptor) return false;
  h.kind = FrameKind::staged;
  send(dst, h, *descriptor, done);
  return true;
}

void Transport::send_actor_frame(int dst, std::vector<uint8_t> call_frame, const std::vector<Tensor>& tensors,
                                 bool awaits_answer) {
  if (dst < 0 || dst >= world_size() || dst == rank())
    throw IndexError("send: actor frame to rank " + std::to_string(dst) + " (world of " + std::to_string(world_size()) +
                     ", this is rank " + std::to_string(rank()) + ")");
  if (tensors.size() > kMaxActorParts)
    throw ValueError("send: " + std::to_string(tensors.size()) + " tensors in one actor call, at most " +
                     std::to_string(kMaxActorParts));
  if (live_.lost(dst)) {
    std::lock_guard lock(mutex_);
    std::rethrow_exception(live_.lost_error(dst));
  }
  check_peer(dst);
  FrameHeader h;
  h.kind = FrameKind::actor;
  h.source = rank();
  h.dtype = DType::u8;
  h.shape = {static_cast<int64_t>(call_frame.size())};
  h.payload_bytes = call_frame.size();
  // The call frame and the tensors as they are: the link that takes the frame writes them.
  send_frame(dst, h, call_frame, tensors, nullptr, awaits_answer);
}

void Transport::send_frame(int dst, FrameHeader& h, std::span<const uint8_t> head, std::span<const Tensor> tensors,
                           const std::shared_ptr<detail::Completion>& done, bool awaits_answer) {
  Peer& peer = *peers_[dst];
  if (!zmq_->connected(dst)) throw CommError("send: the transport is not connected yet");
  bool batched = false;
  for (SendBatch* b = open_send_batch; b && !batched; b = b->outer_) batched = &b->transport_ == this;
  OutgoingFrame frame{dst, &h, head, tensors, done, awaits_answer, batched};
  const size_t frame_bytes = header_size(h.shape.size()) + frame.bytes();
  std::lock_guard lock(peer.send_mutex);
  h.seq = peer.next_seq++;
  Link* link = nullptr;
  // A frame with a device tensor goes to the stripes where they can take it, however small: their
  // writers wait for its copy to host, where the direct link and ZeroMQ would make this thread wait.
  const bool device_part = std::any_of(tensors.begin(), tensors.end(), [](const Tensor& t) { return !t.device().is_cpu(); });
  try {
    if (direct_ && !(device_part && stripes_ && stripes_->takes(frame)) && direct_->send(frame)) {
      link = direct_.get();
    } else {
      // Frames the direct link holds come before this one: out with them now.
      if (direct_ && direct_->flush_before_other(dst)) wake();
      link = stripes_ && stripes_->takes(frame) ? static_cast<Link*>(stripes_.get()) : zmq_.get();
      link->send(frame);
    }
  } catch (...) {
    // Staging a device tensor failed (the error of the work that wrote it) before any of the frame
    // went: its number goes to the next frame, so the peer waits for no frame that never comes.
    --peer.next_seq;
    throw;
  }
  link->traffic(dst).sent(frame_bytes);
  touch();
}

void Transport::keep_actor_frame(Message frame) {
  std::lock_guard lock(mutex_);
  if (actor_backlog_.size() < kActorBacklogMax) actor_backlog_.push_back(std::move(frame));
  else ++dropped_frames_;
}

void Transport::set_actor_handler(std::shared_ptr<ActorHandler> handler) {
  // Holding the ROUTER, no frame is handled meanwhile: the backlog reaches the handler first.
  std::unique_lock router(router_mutex_);
  std::deque<Message> backlog;
  {
    std::unique_lock lock(mutex_);
    actor_handler_ = handler;
    if (handler) backlog.swap(actor_backlog_);
    if (!handler && !telling_handler) {
      // A lost peer's notice still being told finishes first (tell_actor_handler), the ROUTER
      // free meanwhile: its callbacks may receive.
      router.unlock();
      handler_idle_.wait(lock, [&] { return handler_calls_ == 0; });
    }
  }
  if (!handler) return;
  for (Message& m : backlog) {
    const int source = m.source;
    try {
      handler->on_frame(std::move(m));
    } catch (const CommError& e) {
      refuse(source, e);
    }
  }
}

int Transport::direct_links() const { return direct_ ? direct_->links() : 0; }

int Transport::receive_links() {
  int frames = zmq_->receive();
  if (stripes_) frames += stripes_->receive();
  if (direct_) frames += direct_->receive();
  return frames;
}

thread_local Transport::SendBatch* open_send_batch = nullptr;

Transport::SendBatch::SendBatch(Transport& transport) : transport_(transport), outer_(open_send_batch) {
  open_send_batch = this;
}

Transport::SendBatch::~SendBatch() {
  open_send_batch = outer_;
  transport_.write_held();
}

void Transport::write_held() {
  if (!direct_ || !direct_->holding()) return;
  for (int r = 0; r < world_size(); ++r) {
    std::lock_guard lock(peers_[r]->send_mutex);
    if (direct_->holds(r) && direct_->flush(r)) wake();  // the socket is full: the I/O thread writes the rest
  }
}

bool Transport::is_local(int r) const { return r == rank() || peers_[r]->local; }

const std::string& Transport::host_id_of(int r) const {
  return r == rank() ? address_.host_id : host_ids_.at(static_cast<size_t>(r));
}

}  // namespace troupe::net
