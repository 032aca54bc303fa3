#include "net/channel.h"

#include "devices/error_kinds.h"
#include "net/transport.h"

namespace troupe::net {

std::string describe(const OpDescriptor& op) {
  std::string out = name(op.op);
  out += "(";
  if (op.root >= 0) out += "root " + std::to_string(op.root) + ", ";
  if (op.reduce != ReduceOp::none) out += std::string(name(op.reduce)) + ", ";
  return out + troupe::name(op.dtype) + ", " + std::to_string(op.count) + " elements)";
}

void Channel::send(int dst, const OpDescriptor& op, const Tensor& payload) {
  if (dst < 0 || dst >= size())
    throw IndexError(std::string(name(op.op)) + ": rank " + std::to_string(dst) + " outside a group of " +
                     std::to_string(size()));
  FrameHeader h;
  h.kind = FrameKind::collective;
  h.group = group_id();
  h.tag = static_cast<int64_t>(op.collective_seq);
  h.op = op;
  group_->transport().send(group_->global_rank(dst), h, payload);
}

Channel::Incoming Channel::recv(int src, const OpDescriptor& expected, Deadline deadline, std::chrono::microseconds poll) {
  if (src < 0 || src >= size())
    throw IndexError(std::string(name(expected.op)) + ": rank " + std::to_string(src) + " outside a group of " +
                     std::to_string(size()));
  Transport& transport = group_->transport();
  const int64_t tag = static_cast<int64_t>(expected.collective_seq);
  auto slot = transport.post(group_id(), Inbox::collective, tag, group_->global_rank(src));
  std::optional<Message> m = transport.wait(slot, deadline, poll);
  const auto where = [&] {  // only for an error: every small collective passes here
    return std::string(name(expected.op)) + ": collective #" + std::to_string(expected.collective_seq) + " of group " +
           std::to_string(group_id());
  };
  if (!m)
    throw TimeoutError(where() + ": rank " + std::to_string(rank()) + " heard nothing from rank " + std::to_string(src) +
                       " within the timeout");
  if (m->header.kind == FrameKind::control) throw_abort_notice(m->payload);
  const OpDescriptor& got = m->header.op;
  if (got.op != expected.op || got.reduce != expected.reduce || got.dtype != expected.dtype ||
      got.count != expected.count || got.root != expected.root) {
    const CommError error(where() + ": ranks disagree: rank " + std::to_string(rank()) + " called " +
                          describe(expected) + ", rank " + std::to_string(src) + " called " + describe(got));
    abort(expected.collective_seq, error);
    throw error;
  }
  return {src, got, std::move(m->payload)};
}

void Channel::abort(uint64_t collective_seq, const Error& error) {
  const std::string record = ErrorRecord{error.kind(), error.what()}.serialize();
  std::vector<uint8_t> bytes(record.begin(), record.end());
  const Tensor text = Tensor::from_vector<uint8_t>(bytes, {static_cast<int64_t>(bytes.size())});
  FrameHeader h;
  h.kind = FrameKind::control;
  h.group = group_id();
  h.tag = static_cast<int64_t>(collective_seq);
  for (int r = 0; r < size(); ++r) {
    if (r == rank()) continue;
    try {
      group_->transport().send(group_->global_rank(r), h, text);
    } catch (const CommError&) {
      // A rank that is gone cannot be told; its loss fails everyone anyway.
    }
  }
}

void Channel::throw_abort_notice(const Tensor& payload) {
  const auto* bytes = static_cast<const char*>(payload.raw_data());
  std::rethrow_exception(decode_error(ErrorRecord::parse({bytes, static_cast<size_t>(payload.numel())})));
}

}  // namespace troupe::net
