#include "net/transport.h"

#include <malloc.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "actors/observe/metrics_server.h"
#include "actors/observe/profiler.h"
#include "devices/threads.h"
#include "net/errors.h"
#include "net/transport_internal.h"
#include "net/zap_handler.h"
#include "net/zmq_socket.h"

namespace troupe::net {

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

namespace {
// The boot id, a host id's first field, names the machine (all its network namespaces).
std::string machine_of(const std::string& host_id) { return host_id.substr(0, host_id.find('/')); }
}  // namespace

std::chrono::microseconds busy_poll_for(int ranks_on_host, int cpus) {
  return ranks_on_host > cpus ? std::chrono::microseconds(0) : std::chrono::microseconds(50);
}

std::chrono::microseconds small_collective_poll_for(int ranks_on_host, int cpus) {
  return ranks_on_host > cpus ? std::chrono::microseconds(0) : std::chrono::microseconds(10000);
}

Transport::Transport(TransportOptions options) : options_(std::move(options)) {
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
    // The ZAP handler must exist before the ROUTER binds, or CURVE admits every client.
    if (options_.curve) zap_ = bind_zap_handler(context_);
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
    if (!options_.tcp_host.empty() && options_.direct_max > 0 && !options_.curve) open_direct_links();

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
    peers_[r]->staging = same_host && options_.shared_memory && !same_process(a, address_);
    std::string endpoint;
    if (options_.prefer == "ipc") endpoint = a.ipc;
    else if (options_.prefer == "tcp") endpoint = a.tcp;
    else endpoint = same_host ? a.ipc : a.tcp;
    if (endpoint.empty())
      throw CommError("transport: rank " + std::to_string(r) + " has no " + options_.prefer +
                      " endpoint (it advertised '" + a.serialize() + "')");
    connect_dealer(r, endpoint);
    Peer& peer = *peers_[r];
    std::lock_guard lock(peer.send_mutex);
    if (listener_ && !a.direct.empty()) connect_direct_locked(r, a, deadline);
    send_control_locked(peer, FrameKind::hello);
  }
  const int on_this_host = static_cast<int>(std::count(host_ids_.begin(), host_ids_.end(), address_.host_id));
  if (!options_.busy_poll) busy_poll_us_ = busy_poll_for(on_this_host, hardware_cores()).count();
  // A busy-poll turned off (told 0) turns this one off too: that rank is not to spin. Ranks in
  // other network namespaces of this machine count here: a 10 ms spinner holds one of its CPUs.
  const int on_this_machine = static_cast<int>(std::count_if(host_ids_.begin(), host_ids_.end(), [&](const std::string& id) {
    return machine_of(id) == machine_of(address_.host_id);
  }));
  if (!options_.small_collective_poll)
    small_collective_poll_us_ =
        busy_poll().count() == 0 ? 0 : small_collective_poll_for(on_this_machine, hardware_cores()).count();
  spread_over_machine();
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
  // The links lower ranks dialed came before their hellos: answer on them from the first frame.
  const auto linked = [&] {
    for (int r = 0; r < rank(); ++r)
      if (peers_[r]->dialed_link.load() && !peers_[r]->linked.load()) return false;
    return true;
  };
  drive(linked, std::min(deadline, Clock::now() + kLinkWait));
  const char* trace = std::getenv("TROUPE_TRACE");
  if (trace && *trace) sync_trace_clock(deadline);
}

void Transport::send(int dst, FrameHeader h, const Tensor& payload, const std::shared_ptr<detail::Completion>& done) {
  if (dst < 0 || dst >= world_size())
    throw IndexError("send: destination rank " + std::to_string(dst) + " outside a world of " +
                     std::to_string(world_size()));
  check_healthy();
  // The one conversion of this send: a device or strided tensor becomes contiguous host bytes, a
  // device tensor's copied in pieces on the caller's stream while earlier pieces go out.
  HostStaging staged = stage_to_host(payload);
  const Tensor& host = staged.host;
  h.dtype = host.defined() ? host.dtype() : DType::u8;
  h.shape = host.defined() ? host.shape() : Shape{0};
  h.payload_bytes = host.defined() ? host.nbytes() : 0;
  if (h.shape.size() > kMaxFrameDims)
    throw ShapeError("send: cannot send " + host.meta().str() + ": at most " + std::to_string(kMaxFrameDims) +
                     " dims");
  h.source = rank();
  if (dst == rank()) {
    staged.synchronize("send to this rank");
    {
      std::lock_guard lock(mutex_);
      deliver(Message{rank(), std::move(h), host, {}});
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
  const std::span<const uint8_t> payload_bytes{staged.data(), static_cast<size_t>(h.payload_bytes)};
  const HostStaging* stagings[] = {&staged};
  const size_t parts = h.payload_bytes > 0 ? 1u : 0u;
  send_frame(dst, h, {&payload_bytes, parts}, {stagings, parts},
             [&] { return h.payload_bytes > 0 ? std::vector<Tensor>{host} : std::vector<Tensor>{}; }, done);
}

void Transport::send_actor_frame(int dst, std::vector<uint8_t> call_frame, const std::vector<Tensor>& tensors,
                                 bool awaits_answer) {
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
  FrameHeader h;
  h.kind = FrameKind::actor;
  h.source = rank();
  h.dtype = DType::u8;
  h.shape = {static_cast<int64_t>(call_frame.size())};
  h.payload_bytes = call_frame.size();
  // The one conversion of this call's tensors (encode_call leaves them as they are), device ones
  // copied in pieces on the caller's stream while earlier pieces go out.
  std::vector<HostStaging> staged;
  staged.reserve(tensors.size());
  for (const Tensor& t : tensors) staged.push_back(stage_to_host(t));
  std::vector<std::span<const uint8_t>> spans;
  std::vector<const HostStaging*> stagings{nullptr};
  spans.reserve(1 + staged.size());
  spans.emplace_back(call_frame.data(), call_frame.size());
  for (const HostStaging& s : staged) {
    spans.emplace_back(s.data(), s.bytes());
    stagings.push_back(&s);
  }
  send_frame(dst, h, spans, stagings, [&] {
    // The call frame's bytes move into a storage of their own: a part like the tensors.
    auto bytes = std::make_shared<std::vector<uint8_t>>(std::move(call_frame));
    std::vector<Tensor> parts;
    parts.reserve(1 + staged.size());
    parts.emplace_back(std::make_shared<Storage>(bytes->data(), bytes->size(), Device::cpu(), [bytes](void*) {}),
                       DType::u8, h.shape, Strides{1}, 0);
    for (HostStaging& s : staged) parts.push_back(std::move(s.host));
    return parts;
  }, nullptr, awaits_answer);
}

void Transport::send_frame(int dst, FrameHeader& h, std::span<const std::span<const uint8_t>> spans,
                           std::span<const HostStaging* const> staged,
                           const std::function<std::vector<Tensor>()>& owned,
                           const std::shared_ptr<detail::Completion>& done, bool awaits_answer) {
  Peer& peer = *peers_[dst];
  if (!peer.dealer) throw CommError("send: the transport is not connected yet");
  size_t frame_bytes = header_size(h.shape.size());
  for (const auto& s : spans) frame_bytes += s.size();
  // Only the stripes' threads wait for the pieces of a staged device tensor as they write them, so
  // such a frame takes the stripes whatever its size; the other paths write at once, so without
  // stripes this thread waits for the copies first (a counted sync).
  bool copies_pending = false;
  for (const HostStaging* s : staged) copies_pending |= s && !s->pieces.empty();
  auto wait_copies = [&] {
    if (!copies_pending) return;
    for (const HostStaging* s : staged)
      if (s) s->synchronize("send: a device tensor's bytes to the network");
    copies_pending = false;
  };
  if (copies_pending && !takes_stripes(dst, spans, true)) wait_copies();
  std::lock_guard lock(peer.send_mutex);
  h.seq = peer.next_seq++;
  const bool striped = takes_stripes(dst, spans, copies_pending);
  if (!striped) wait_copies();  // the stripes broke meanwhile
  if (send_direct_locked(peer, h, spans, awaits_answer)) {
    peer.count_sent(direct_path, frame_bytes);
    if (done) done->finish();
    touch();
    return;
  }
  // Frames the direct link holds come before this one: out with them now.
  if (peer.direct && peer.direct->backlogged() && flush_direct_locked(peer)) wake();
  if (striped) {
    peer.count_sent(stripes_path, frame_bytes);
    // Each part's pieces: the byte counts, within the part, that its events make ready.
    std::vector<PartGates> gates(spans.size());
    for (size_t i = 0; i < staged.size(); ++i)
      if (staged[i]) gates[i] = staged[i]->pieces;
    auto parts = std::make_shared<std::vector<Tensor>>(owned());
    // The same bytes as the spans (owned() only moved them into tensors): the stripes keep parts alive.
    std::vector<std::span<const uint8_t>> kept;
    for (const Tensor& p : *parts) kept.emplace_back(static_cast<const uint8_t*>(p.raw_data()), p.nbytes());
    send_striped_locked(dst, h, kept, std::move(gates), std::move(parts), done);
  } else {
    send_zmq_locked(dst, h, owned(), done);
    peer.count_sent(zmq_path, frame_bytes);
  }
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
      refuse_frame(source, e);
    }
  }
}

int Transport::direct_links() const {
  int links = 0;
  for (const auto& peer : peers_) links += peer->linked.load();
  return links;
}

bool Transport::is_local(int r) const { return r == rank() || peers_[r]->local; }

const std::string& Transport::host_id_of(int r) const {
  return r == rank() ? address_.host_id : host_ids_.at(static_cast<size_t>(r));
}

void Transport::io_loop() {
  name_this_thread("troupe-io");
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
    io_turns_soon_.store(wait_ms <= 1, std::memory_order_relaxed);
    const int rc = zmq_poll(items.data(), static_cast<int>(items.size()), std::max<long>(0, wait_ms));
    if (rc < 0 && zmq_errno() != EINTR) break;
    if (listener_ && (items[fixed_items].revents & ZMQ_POLLIN)) {
      std::lock_guard lock(accepted_mutex_);
      for (int fd = listener_->accept(); fd >= 0; fd = listener_->accept()) accepted_.push_back(fd);
    }
    for (size_t i = 0; i < backlogged.size(); ++i) {
      Peer& peer = *peers_[backlogged[i]];
      std::lock_guard lock(peer.send_mutex);
      flush_direct_locked(peer);
    }
    // The ROUTER's descriptor is edge-like: drain on every turn, not only when it fired.
    if (Clock::now() - Clock::time_point(Clock::duration(last_lead_.load())) >= kLeadSlice) {
      io_thread_reads_.store(true, std::memory_order_relaxed);  // from before the lock to after it
      {
        std::unique_lock router(router_mutex_, std::try_to_lock);
        router_led = !router.owns_lock();
        if (router.owns_lock()) {
          if (handle_router() + handle_direct() > 0) write_held();
          inbound_fds.clear();
          for (const auto& in : inbound_) inbound_fds.push_back(in->fd());
          if (striped_ready_fd_ >= 0) inbound_fds.push_back(striped_ready_fd_);
        }
      }
      io_thread_reads_.store(false, std::memory_order_relaxed);
    } else {
      router_led = true;
    }
    if (rc > 0) {
      if (items[1].revents & ZMQ_POLLIN) {
        char byte;
        while (zmq_recv(wake_rx_, &byte, 1, ZMQ_DONTWAIT) >= 0) {
        }
      }
      if (zap_ && (items[2].revents & ZMQ_POLLIN)) answer_zap_requests(zap_, *options_.curve);
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

}  // namespace troupe::net
