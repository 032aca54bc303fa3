#include "net/remote/mesh_chain_reduce.h"

#include <algorithm>
#include <cstring>

#include "devices/error_kinds.h"
#include "net/remote/mesh_tree.h"

namespace troupe::net::detail {

namespace {

std::string answers_differ(DType a_dtype, const Shape& a_shape, DType b_dtype, const Shape& b_shape) {
  TensorMeta a, b;
  a.dtype = a_dtype;
  a.shape = a_shape;
  b.dtype = b_dtype;
  b.shape = b_shape;
  return "mesh call_reduce: members answered " + a.str() + " and " + b.str() + "; a reduction needs one shape and dtype";
}

}  // namespace

ChainReduction::ChainReduction(Up up, ReduceOp op, size_t chunk_bytes, size_t members, bool has_child)
    : up_(std::move(up)), op_(op), members_(members), has_child_(has_child), chunk_bytes_(chunk_bytes) {
  if (chunk_bytes == 0) throw ValueError("mesh call_reduce: chunks of 0 bytes");
  if (members == 0) throw ValueError("mesh call_reduce: a relay in the chain with no members");
}

bool ChainReduction::finished() const {
  std::lock_guard lock(mutex_);
  return finished_;
}

void ChainReduction::member_answered(const WireValue& answer) {
  std::unique_lock lock(mutex_);
  if (finished_) return;
  try {
    if (answer.kind() != WireValue::Kind::tensor) std::rethrow_exception(Codec<std::exception_ptr>::decode(answer));
    const Tensor& t = answer.as_tensor();
    if (!error_) {
      if (own_.defined() && (t.shape() != shape_ || t.dtype() != own_.dtype()))
        throw ShapeError(answers_differ(own_.dtype(), shape_, t.dtype(), t.shape()));
      // Flat and on the host: a chunk is a byte range of it, the same elements on every relay.
      const Tensor flat = host_contiguous(t).flatten();
      if (!own_.defined()) shape_ = t.shape();
      own_ = own_.defined() ? combine(own_, flat, op_) : flat;
    }
  } catch (...) {
    if (!error_) error_ = std::current_exception();
  }
  if (++answered_ == members_) own_ready();
  send(lock);
}

void ChainReduction::own_ready() {
  if (error_) return fail_up();
  const size_t item = itemsize(own_.dtype());
  chunk_bytes_ = std::max(item, chunk_bytes_ / item * item);  // whole elements
  if (!has_child_) return complete();
  auto held = std::move(held_);
  for (const Held& h : held) {
    if (!check_child(h.offset, h.shape, h.piece)) return fail_up();
    consume(h.offset, h.piece);
    if (finished_) return;
  }
}

void ChainReduction::child_chunk(int64_t offset, const Shape& shape, int64_t count, const Tensor& piece) {
  std::unique_lock lock(mutex_);
  if (finished_) return;
  child_count_ = count;
  if (answered_ < members_) return held_.push_back({offset, shape, piece});
  if (check_child(offset, shape, piece)) consume(offset, piece);
  else fail_up();
  send(lock);
}

void ChainReduction::child_failed(const WireValue& error) {
  std::unique_lock lock(mutex_);
  if (finished_) return;
  if (!error_) {
    try {
      std::rethrow_exception(Codec<std::exception_ptr>::decode(error));
    } catch (...) {
      error_ = std::current_exception();
    }
  }
  held_.clear();
  if (answered_ == members_) fail_up();  // else when the last member answers
  send(lock);
}

void ChainReduction::send(std::unique_lock<std::mutex>& lock) {
  // Outside the lock: a send to this rank runs the receiver's handler here, which takes its locks.
  std::vector<Outgoing> out = std::exchange(outbox_, {});
  lock.unlock();
  for (Outgoing& o : out) {
    if (o.method) up_.tell(up_.parent_rank, up_.parent_relay, o.method, std::move(o.arguments));
    else up_.respond(std::move(o.arguments));
  }
}

bool ChainReduction::check_child(int64_t offset, const Shape& shape, const Tensor& piece) {
  if (shape != shape_ || piece.dtype() != own_.dtype()) {
    error_ = std::make_exception_ptr(
        ShapeError(answers_differ(own_.dtype(), shape_, piece.dtype(), shape)));
    return false;
  }
  const size_t item = itemsize(own_.dtype());
  if (offset < 0 || static_cast<size_t>(offset) % item != 0 || static_cast<size_t>(offset) + piece.nbytes() > own_.nbytes()) {
    error_ = std::make_exception_ptr(ValueError("mesh call_reduce: a chunk of " + std::to_string(piece.nbytes()) +
                                                " bytes at " + std::to_string(offset) + ", outside the answer's " +
                                                std::to_string(own_.nbytes())));
    return false;
  }
  return true;
}

void ChainReduction::consume(int64_t offset, const Tensor& piece) {
  const int64_t first = offset / static_cast<int64_t>(itemsize(own_.dtype()));
  Tensor combined;
  try {
    combined = combine(own_.slice(0, first, first + piece.numel()), piece.flatten(), op_);
  } catch (...) {
    error_ = std::current_exception();
    return fail_up();
  }
  emit(static_cast<size_t>(offset), combined);
  child_bytes_ += piece.nbytes();
  if (child_bytes_ == own_.nbytes()) complete();
}

void ChainReduction::emit(size_t offset, const Tensor& combined) {
  const Tensor host = host_contiguous(combined);
  if (head()) {
    if (!result_.defined()) result_ = Tensor::empty(shape_, own_.dtype());
    std::memcpy(static_cast<uint8_t*>(result_.mutable_raw_data()) + offset, host.raw_data(), host.nbytes());
    return;
  }
  WireValue::List shape;
  for (int64_t d : shape_) shape.push_back(WireValue::integer(d));
  outbox_.push_back({"partial_chunk", WireValue::list({WireValue::integer(up_.origin), WireValue::integer(up_.call),
                            WireValue::integer(static_cast<int64_t>(offset)), WireValue::list(std::move(shape)),
                            WireValue::integer(static_cast<int64_t>(answered_) + child_count_), WireValue::tensor(host)})});
}

void ChainReduction::complete() {
  finished_ = true;
  if (head()) {
    const Tensor whole = has_child_ ? result_ : own_.reshape(shape_);
    outbox_.push_back({nullptr, WireValue::list({WireValue::tensor(whole),
                                                 WireValue::integer(static_cast<int64_t>(answered_) + child_count_)})});
    return;
  }
  if (has_child_) return;  // every combined chunk went up as it came
  const int64_t item = static_cast<int64_t>(itemsize(own_.dtype()));
  for (auto [begin, end] : chunk_ranges(own_.nbytes(), chunk_bytes_))  // the tail: its own answers, in chunks
    emit(begin, own_.slice(0, static_cast<int64_t>(begin) / item, static_cast<int64_t>(end) / item));
}

void ChainReduction::fail_up() {
  finished_ = true;
  held_.clear();
  const WireValue error = Codec<std::exception_ptr>::encode(error_);
  if (head()) return outbox_.push_back({nullptr, WireValue::list({error, WireValue::integer(0)})});
  outbox_.push_back({"partial", WireValue::list({WireValue::integer(up_.origin), WireValue::integer(up_.call), error,
                                                 WireValue::integer(0)})});
}

}  // namespace troupe::net::detail
