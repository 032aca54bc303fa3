#pragma once
// DataflowChannel: one executor's line to the executors on the other ranks of its process group.
// It sends typed dataflow frames (dataflow_frame.h) on the transport's dataflow lane, keyed by
// the channel's id: every rank makes its channels on a group in the same order, so the n-th
// channel of a group on one rank talks to the n-th on every other, and no p2p tag is taken.
//
//   DataflowChannel channel(group);                               // every rank, in the same order
//   channel.start(/*peer=*/1, /*invocation=*/7);
//   channel.data(1, 7, /*node=*/3, /*slot=*/0, /*live=*/true, tensor);  // zero-copy payload
//   DataflowChannel::Incoming in = channel.receive(/*peer=*/1);    // blocks; in order per peer
//   if (in.header.message == DataflowMessage::ack && in.error) std::rethrow_exception(in.error);
//
// Sends never block. receive() waits without a deadline (a peer is lost within seconds: then
// PeerLostError), and throws CommError for a malformed frame.
#include <cstdint>
#include <exception>
#include <memory>

#include "devices/tensor.h"
#include "net/dataflow_frame.h"

namespace troupe::net {

class ProcessGroup;

class DataflowChannel {
 public:
  struct Incoming {
    DataflowHeader header;
    Tensor value;              // data: the value when live
    std::exception_ptr error;  // ack: the peer's error, the same type it threw
  };

  explicit DataflowChannel(std::shared_ptr<ProcessGroup> group);

  int rank() const;  // in the group
  int size() const;
  uint64_t id() const { return id_; }

  void start(int peer, uint64_t invocation);
  // A value for input `slot` of plan node `node` (-1: graph output `slot`); live false: a dead token.
  void data(int peer, uint64_t invocation, int node, int slot, bool live, const Tensor& value);
  // Done with the invocation; error (if any) travels as its ErrorRecord.
  void ack(int peer, uint64_t invocation, const std::exception_ptr& error);
  void stop(int peer);

  Incoming receive(int peer);

 private:
  void send(int peer, const DataflowHeader& header, const Tensor& payload);

  std::shared_ptr<ProcessGroup> group_;
  uint64_t id_;
};

}  // namespace troupe::net
