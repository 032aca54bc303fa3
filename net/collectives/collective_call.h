#pragma once
// One rank's part of one collective call (internal to net/collectives/): the group's channel, the
// call's descriptor (identical on every rank that made the same call) and its deadline. Every
// frame an algorithm sends carries the descriptor, so the first exchange already catches ranks
// that called something else.
//
//   CollectiveCall call = begin_call(group, CollectiveOp::all_reduce, ReduceOp::sum, DType::f32, n);  // group_state.h
//   call.send(right, chunk);
//   Tensor got = call.recv(left);
#include "devices/tensor.h"
#include "net/channel.h"

namespace troupe::net::collectives {

struct CollectiveCall {
  Channel channel;
  OpDescriptor op;
  Deadline deadline;
  // How long a receive polls before its thread sleeps (Transport::wait; set by the caller's run).
  std::chrono::microseconds poll{};
  // The algorithm that ran, set by the rank's part: the algorithm label of the collective's metrics.
  const char* algorithm = "local";

  int rank() const { return channel.rank(); }
  int size() const { return channel.size(); }
  void send(int dst, const Tensor& payload) { channel.send(dst, op, payload); }
  Tensor recv(int src) { return channel.recv(src, op, deadline, poll).payload; }
  // A header-only frame: "I am in this call" for ranks that would otherwise hear nothing.
  void send_note(int dst) { channel.send(dst, op, Tensor::empty({0}, DType::u8)); }

  // Agreement for the rooted collectives, where data flows along a tree or star picked by the
  // root, so ranks that disagree (about the root, say) might never talk to each other. Every rank
  // announces its call to rank 0 first; rank 0 checks every announcement before any receive of
  // its own that could block; nobody returns before rank 0 confirmed. So any disagreement fails
  // on every rank (rank 0 aborts the call) and never deadlocks.
  void announce() {
    if (rank() != 0) send_note(0);
  }
  void check_announcements() {
    if (rank() == 0)
      for (int r = 1; r < size(); ++r) recv(r);
  }
  void confirm() {
    if (rank() != 0) {
      recv(0);
      return;
    }
    for (int r = 1; r < size(); ++r) send_note(r);
  }
};

}  // namespace troupe::net::collectives
