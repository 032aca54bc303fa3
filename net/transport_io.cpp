// The transport's I/O thread (transport.h): what no waiting thread does. It polls the ZeroMQ
// ROUTER when no thread leads, the direct links' listener and the links that keep unwritten bytes,
// the ZAP handler, the ROUTER's monitor and the peers' monitors, and sends the heartbeats each
// heartbeat_interval.
#include <zmq.h>

#include <algorithm>
#include <cerrno>

#include "devices/threads.h"
#include "net/transport_internal.h"

namespace troupe::net {

void Transport::io_loop() {
  name_this_thread("troupe-io");
  std::vector<zmq_pollitem_t> items;
  std::vector<int> monitor_peer;  // items[first_monitor + i] watches peer monitor_peer[i]
  void* const zap = zmq_->zap();
  const size_t router_monitor = zap ? 3 : 2;  // the ROUTER's own monitor: strangers cut off
  const size_t first_monitor = router_monitor + 1;
  bool monitoring = false;
  auto rebuild = [&] {
    items = {{nullptr, zmq_->router_fd(), ZMQ_POLLIN, 0}, {wake_rx_, 0, ZMQ_POLLIN, 0}};
    if (zap) items.push_back({zap, 0, ZMQ_POLLIN, 0});
    items.push_back({zmq_->router_monitor(), 0, ZMQ_POLLIN, 0});
    monitor_peer.clear();
    for (int r = 0; r < world_size(); ++r)
      if (monitoring && zmq_->monitor(r)) {
        items.push_back({zmq_->monitor(r), 0, ZMQ_POLLIN, 0});
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
      live_.start(now);
      rebuild();
    }
    // Direct links: new connections, the inbound ones (read here only when nobody leads: they are
    // level-triggered), and the outbound ones that keep bytes the socket did not take yet.
    items.resize(fixed_items);
    if (direct_) items.push_back({nullptr, direct_->listener_fd(), ZMQ_POLLIN, 0});
    if (!router_led)
      for (int fd : inbound_fds) items.push_back({nullptr, fd, ZMQ_POLLIN, 0});
    backlogged.clear();
    for (int r = 0; r < world_size(); ++r)
      if (direct_ && direct_->backlogged(r)) {
        backlogged.push_back(r);
        items.push_back({nullptr, direct_->fd(r), ZMQ_POLLOUT, 0});
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
    if (direct_ && (items[fixed_items].revents & ZMQ_POLLIN)) direct_->accept_waiting();
    for (int r : backlogged) {
      std::lock_guard lock(peers_[r]->send_mutex);
      direct_->flush(r);
    }
    // The ROUTER's descriptor is edge-like: drain on every turn, not only when it fired.
    if (Clock::now() - Clock::time_point(Clock::duration(last_lead_.load())) >= kLeadSlice) {
      io_thread_reads_.store(true, std::memory_order_relaxed);  // from before the lock to after it
      {
        std::unique_lock router(router_mutex_, std::try_to_lock);
        router_led = !router.owns_lock();
        if (router.owns_lock()) {
          if (receive_links() > 0) write_held();
          inbound_fds.clear();
          if (direct_) direct_->wait_fds(inbound_fds);
          if (stripes_) stripes_->wait_fds(inbound_fds);
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
      if (zap && (items[2].revents & ZMQ_POLLIN)) zmq_->answer_zap();
      if (items[router_monitor].revents & ZMQ_POLLIN) zmq_->read_router_monitor();
      for (size_t i = 0; i < monitor_peer.size(); ++i)
        if (items[first_monitor + i].revents & ZMQ_POLLIN) zmq_->read_monitor(monitor_peer[i]);
    }
    if (stopping_) break;
    const auto now = Clock::now();
    if (now >= next_tick) {
      tick(now);
      next_tick = now + options_.heartbeat_interval;
    }
  }
  zmq_->close_receiving();
  zmq_close(wake_rx_);
}

}  // namespace troupe::net
