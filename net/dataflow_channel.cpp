#include "net/dataflow_channel.h"

#include <string>
#include <vector>

#include "devices/error_kinds.h"
#include "net/process_group.h"
#include "net/transport.h"

namespace troupe::net {

DataflowChannel::DataflowChannel(std::shared_ptr<ProcessGroup> group)
    : group_(std::move(group)), id_(group_->next_dataflow_channel_id()) {}

int DataflowChannel::rank() const { return group_->rank(); }
int DataflowChannel::size() const { return group_->size(); }

void DataflowChannel::start(int peer, uint64_t invocation) {
  send(peer, {.message = DataflowMessage::start, .invocation = invocation}, {});
}

void DataflowChannel::data(int peer, uint64_t invocation, int node, int slot, bool live, const Tensor& value) {
  send(peer, {DataflowMessage::data, invocation, node, slot, live}, live ? value : Tensor());
}

void DataflowChannel::ack(int peer, uint64_t invocation, const std::exception_ptr& error) {
  Tensor text;
  if (error) {
    const std::string record = encode_error(error).serialize();
    text = Tensor::from_vector(std::vector<uint8_t>(record.begin(), record.end()), {static_cast<int64_t>(record.size())});
  }
  send(peer, {.message = DataflowMessage::ack, .invocation = invocation, .error = error != nullptr}, text);
}

void DataflowChannel::stop(int peer) { send(peer, {.message = DataflowMessage::stop}, {}); }

void DataflowChannel::send(int peer, const DataflowHeader& header, const Tensor& payload) {
  FrameHeader h;
  h.kind = FrameKind::dataflow;
  h.group = group_->id();
  h.tag = static_cast<int64_t>(id_);
  h.dataflow = header;
  group_->transport().send(group_->global_rank(peer), h, payload);
}

DataflowChannel::Incoming DataflowChannel::receive(int peer) {
  Transport& transport = group_->transport();
  auto slot = transport.post(group_->id(), Lane::dataflow, static_cast<int64_t>(id_), group_->global_rank(peer));
  std::optional<Message> m = transport.wait(slot, deadline_after(std::chrono::milliseconds::max()));
  if (!m) throw TimeoutError("dataflow channel " + std::to_string(id_) + ": no message from rank " + std::to_string(peer));
  Incoming in{m->header.dataflow, {}, nullptr};
  if (in.header.live) in.value = std::move(m->payload);
  if (in.header.error) {
    const auto* bytes = static_cast<const char*>(m->payload.raw_data());
    in.error = decode_error(ErrorRecord::parse({bytes, static_cast<size_t>(m->payload.numel())}));
  }
  return in;
}

}  // namespace troupe::net
