#include "net/remote/mesh_tree.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "actors/observe/profiler.h"
#include "devices/error_kinds.h"
#include "devices/ops.h"
#include "net/remote/actor_type.h"
#include "net/remote/endpoint.h"
#include "net/remote/mesh_chain_reduce.h"
#include "net/remote/on_receipt.h"

namespace troupe::net::detail {

std::vector<std::pair<size_t, size_t>> tree_children(size_t n, size_t fanout) {
  std::vector<std::pair<size_t, size_t>> children;
  if (fanout > 0 && n > 1) {
    const size_t rest = n - 1, k = std::min(fanout, rest);
    for (size_t i = 0, begin = 1; i < k; ++i) {
      const size_t size = rest / k + (i < rest % k ? 1 : 0);
      children.emplace_back(begin, begin + size);
      begin += size;
    }
    return children;
  }
  for (size_t end = n; end > 1;) {
    const size_t mid = (end + 1) / 2;
    children.emplace_back(mid, end);
    end = mid;
  }
  return children;
}

Tensor combine(const Tensor& a, const Tensor& b, ReduceOp op) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype())
    throw ShapeError("mesh call_reduce: members answered " + a.meta().str() + " and " + b.meta().str() +
                     "; a reduction needs one shape and dtype");
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return add(a, b);
    case ReduceOp::product: return mul(a, b);
    case ReduceOp::max: return maximum(a, b);
    case ReduceOp::min: return minimum(a, b);
    case ReduceOp::none: break;
  }
  throw ValueError("mesh call_reduce: no reduce op given");
}

std::string relay_name(const std::string& mesh, int rank) { return mesh + ".relay/" + std::to_string(rank); }

std::vector<std::pair<size_t, size_t>> chunk_ranges(size_t bytes, size_t chunk) {
  if (chunk == 0) throw ValueError("mesh: chunks of 0 bytes");
  std::vector<std::pair<size_t, size_t>> ranges;
  for (size_t offset = 0; offset < bytes; offset += chunk) ranges.emplace_back(offset, std::min(bytes, offset + chunk));
  return ranges;
}

namespace {

// A tell to an actor by its address, as a relay sends it (no lookup, no handle).
void tell(RemoteActors::Impl& node, int64_t rank, int64_t actor, const char* method, WireValue arguments) {
  node.post(static_cast<int>(rank), CallFrame{CallKind::tell, static_cast<uint64_t>(actor), 0, method, std::move(arguments)});
}

// A member's answer to a reduction as its relay combines it: the tensor, or the encoded error (an
// answer that is no tensor is a ValueError naming the member).
WireValue member_contribution(const std::string& member, WireValue&& result, std::exception_ptr error) {
  if (!error && result.kind() != WireValue::Kind::tensor)
    error = std::make_exception_ptr(ValueError("mesh call_reduce: member '" + member + "' answered " +
                                               result.describe() + ", not a tensor"));
  return error ? Codec<std::exception_ptr>::encode(error) : std::move(result);
}

// A reduction in progress on one relay: its members' answers and its children's partials, then
// one partial to its parent.
struct Reduction {
  std::mutex mutex;
  int waiting = 0;
  Tensor value;
  std::exception_ptr error;  // the first
  int64_t members = 0;
  ReduceOp op = ReduceOp::sum;
  int64_t parent_rank = -1, parent_relay = 0;  // a relay; rank -1: the caller, answered as its request `reply`
  std::weak_ptr<RemoteActors::Impl> node;      // this rank's
  int64_t origin = 0, call = 0, reply = 0;

  // Returns true when this was the last contribution.
  bool add(const WireValue& contribution, int64_t count) {
    std::lock_guard lock(mutex);
    try {
      if (contribution.kind() == WireValue::Kind::tensor) {
        value = value.defined() ? combine(value, contribution.as_tensor(), op) : contribution.as_tensor();
        members += count;
      } else if (!error) {
        error = Codec<std::exception_ptr>::decode(contribution);
      }
    } catch (...) {
      if (!error) error = std::current_exception();
    }
    return --waiting == 0;
  }
  void finish() {
    auto here = node.lock();
    if (!here) return;
    WireValue out = error ? Codec<std::exception_ptr>::encode(error) : WireValue::tensor(value);
    if (parent_rank < 0)
      return here->respond(static_cast<int>(origin), static_cast<uint64_t>(reply),
                           WireValue::list({std::move(out), WireValue::integer(members)}), "mesh relay: ");
    try {
      tell(*here, parent_rank, parent_relay, "partial",
           WireValue::list({WireValue::integer(origin), WireValue::integer(call), std::move(out), WireValue::integer(members)}));
    } catch (const std::exception& e) {  // the parent's rank is gone: its caller hears of that loss
      std::cerr << "mesh relay: a reduction's partial found no parent: " << e.what() << std::endl;
    }
  }
};

// A relay's reductions in progress, by (origin, call): shared with the answers' callbacks, which
// may outlive a stopped relay.
struct Reductions {
  std::mutex mutex;
  std::map<std::pair<int64_t, int64_t>, std::shared_ptr<Reduction>> by_call;

  void contribute(const std::shared_ptr<Reduction>& reduction, const WireValue& value, int64_t count) {
    if (!reduction->add(value, count)) return;
    {
      std::lock_guard lock(mutex);
      by_call.erase({reduction->origin, reduction->call});
    }
    reduction->finish();
  }
};

// The answers of one relay's members to one call, sent to the caller together as the answer to
// its request `reply`.
struct Answers {
  std::mutex mutex;
  WireValue::List results;  // [member, result, error]
  size_t left = 0;
  std::weak_ptr<RemoteActors::Impl> node;
  int64_t origin = 0, reply = 0;
};

// A call whose streamed arguments are still coming: the chunks go on to the children's roots
// as they arrive, and into the arguments' buffers; the members' call starts with the last.
struct Incoming {
  std::mutex mutex;
  FanCall call;  // without its nodes
  MeshNode mine;
  std::shared_ptr<Reduction> reduction;
  std::vector<std::pair<int64_t, int64_t>> next;  // the children's roots: (rank, relay)
  std::vector<Tensor> buffers;                    // by streamed argument
  std::vector<uint8_t*> bytes;                    // their storage
  size_t left = 0;                                // bytes still to come, of all of them
};

// A mesh's actor on each rank that hosts its members: it forwards calls down the tree and runs
// them on its members. It runs on the receiving thread (on_receipt, registered below): its
// handlers never wait, and take its mutex for what they share.
class MeshRelay {
 public:
  explicit MeshRelay(std::string mesh) : mesh_(std::move(mesh)), node_(this_node("mesh relay")) {}

  void fan(FanCall f) {
    if (f.nodes.empty()) throw ValueError("mesh relay '" + mesh_ + "': a call with no ranks");
    auto here = node_.lock();
    if (!here) return;  // this rank is closing
    if (!first_time(f.origin, f.call)) {  // sent again after a loss, and run already
      if (f.streamed.empty()) finish_from_resend(*here, f);
      return;
    }
    std::vector<MeshNode> nodes = std::move(f.nodes);
    const MeshNode mine = nodes[0];
    std::optional<RemoteSpan> span;  // the end of the caller's arrow (mesh_call.cpp), in a trace
    if (Profiler::global().recording())
      span.emplace(relay_name(mesh_, static_cast<int>(mine.rank)) + " " + f.method,
                   mine.reply ? Profiler::remote_flow_id(static_cast<int>(f.origin), static_cast<uint64_t>(mine.reply)) : 0);
    const auto children = tree_children(nodes.size(), static_cast<size_t>(f.fanout));
    std::shared_ptr<Reduction> reduction;
    std::shared_ptr<ChainReduction> chain;
    if (f.mode == kFanReduce && f.chunk > 0) {
      chain = start_chain(f, mine, !children.empty());
    } else if (f.mode == kFanReduce) {
      reduction = std::make_shared<Reduction>();
      reduction->waiting = static_cast<int>(children.size() + mine.members.size());
      reduction->op = static_cast<ReduceOp>(f.op);
      reduction->parent_rank = f.parent_rank;
      reduction->parent_relay = f.parent_relay;
      reduction->node = node_;
      reduction->origin = f.origin;
      reduction->call = f.call;
      reduction->reply = f.reply;
      std::lock_guard lock(reductions_->mutex);
      reductions_->by_call[{f.origin, f.call}] = reduction;
    }
    const int64_t parent_rank = f.parent_rank, parent_relay = f.parent_relay;
    f.parent_rank = mine.rank;
    f.parent_relay = mine.relay;
    std::shared_ptr<Incoming> incoming;
    if (!f.streamed.empty()) incoming = expect_chunks(f, mine, reduction);
    for (auto [begin, end] : children) {
      if (incoming) incoming->next.emplace_back(nodes[begin].rank, nodes[begin].relay);
      f.nodes.assign(nodes.begin() + static_cast<ptrdiff_t>(begin), nodes.begin() + static_cast<ptrdiff_t>(end));
      try {
        tell(*here, f.nodes[0].rank, f.nodes[0].relay, "fan", WireValue::list({to_value(f)}));
      } catch (...) {  // its rank is gone: the caller re-sends answers; a reduction fails
        if (reduction) reductions_->contribute(reduction, Codec<std::exception_ptr>::encode(std::current_exception()), 0);
        if (chain) chain->child_failed(Codec<std::exception_ptr>::encode(std::current_exception()));
      }
    }
    f.parent_rank = parent_rank;
    f.parent_relay = parent_relay;
    if (!incoming) run_members(*here, f, mine, reduction, chain);
  }

  // A piece of streamed argument `which` of a call, at byte `offset`: on to the children, then
  // into its buffer; the last one starts the members' call.
  void chunk(int64_t origin, int64_t call, int64_t which, int64_t offset, Tensor piece) {
    std::shared_ptr<Incoming> in;
    {
      std::lock_guard lock(mutex_);
      auto it = incoming_.find({origin, call});
      if (it == incoming_.end()) return;  // completed from a re-send after a loss
      in = it->second;
    }
    auto here = node_.lock();
    if (!here) return;
    for (auto [rank, relay] : in->next) {
      try {
        tell(*here, rank, relay, "chunk",
             WireValue::list({WireValue::integer(origin), WireValue::integer(call), WireValue::integer(which),
                              WireValue::integer(offset), WireValue::tensor(piece)}));
      } catch (const CommError&) {  // that child's rank is gone: the caller hears of it and re-sends below it
      }
    }
    const size_t at = static_cast<size_t>(offset), n = piece.nbytes();
    if (which < 0 || static_cast<size_t>(which) >= in->buffers.size() || offset < 0 ||
        at + n > in->buffers[static_cast<size_t>(which)].nbytes())
      throw ValueError("mesh relay '" + mesh_ + "': a chunk of " + std::to_string(n) + " bytes at " +
                       std::to_string(offset) + " for streamed argument " + std::to_string(which) +
                       ", outside it");
    std::memcpy(in->bytes[static_cast<size_t>(which)] + at, host_contiguous(piece).raw_data(), n);
    bool last;
    {
      std::lock_guard lock(in->mutex);
      last = (in->left -= n) == 0;
    }
    if (!last) return;
    {
      std::lock_guard lock(mutex_);
      if (incoming_.erase({origin, call}) == 0) return;  // a re-send completed it meanwhile
    }
    for (size_t i = 0; i < in->buffers.size(); ++i)
      in->call.arguments.as_list().at(static_cast<size_t>(in->call.streamed[i].position)) = WireValue::tensor(in->buffers[i]);
    run_members(*here, in->call, in->mine, in->reduction, nullptr);
  }

  // This relay's actor id, which the caller puts in its calls (nodes[i].relay) so that relays
  // address each other without a lookup.
  int64_t id() {
    auto here = node_.lock();
    if (!here) throw ValueError("mesh relay '" + mesh_ + "': its rank is closing");
    return static_cast<int64_t>(hosted_id(*here, relay_name(mesh_, here->rank)));
  }

  // A chunk of the combined answers of the relay below, in a reduction up a chain.
  void partial_chunk(int64_t origin, int64_t call, int64_t offset, std::vector<int64_t> shape, int64_t count, Tensor piece) {
    if (auto chain = chain_of(origin, call)) chain->child_chunk(offset, Shape(shape.begin(), shape.end()), count, piece);
  }

  void partial(int64_t origin, int64_t call, WireValue value, int64_t count) {
    if (auto chain = chain_of(origin, call)) return chain->child_failed(value);  // a chain's partials are errors
    std::shared_ptr<Reduction> reduction;
    {
      std::lock_guard lock(reductions_->mutex);
      auto it = reductions_->by_call.find({origin, call});
      if (it == reductions_->by_call.end()) return;  // failed and forgotten
      reduction = it->second;
    }
    reductions_->contribute(reduction, value, count);
  }

 private:
  // A reduction up a chain, kept until it finished: those that did are forgotten as the next starts.
  std::shared_ptr<ChainReduction> start_chain(const FanCall& f, const MeshNode& mine, bool has_child) {
    ChainReduction::Up up;
    up.tell = [node = node_, mesh = mesh_](int64_t rank, int64_t relay, const char* method, WireValue arguments) {
      auto here = node.lock();
      if (!here) return;
      try {
        tell(*here, rank, relay, method, std::move(arguments));
      } catch (const std::exception& e) {  // the rank above is gone: the caller hears of that loss
        std::cerr << "mesh relay '" << mesh << "': a reduction's chunk found no relay above: " << e.what() << std::endl;
      }
    };
    up.respond = [node = node_, origin = f.origin, reply = f.reply](WireValue answer) {
      if (auto here = node.lock()) here->respond(static_cast<int>(origin), static_cast<uint64_t>(reply), std::move(answer), "mesh relay: ");
    };
    up.origin = f.origin;
    up.call = f.call;
    up.parent_rank = f.parent_rank;
    up.parent_relay = f.parent_relay;
    auto chain = std::make_shared<ChainReduction>(std::move(up), static_cast<ReduceOp>(f.op), static_cast<size_t>(f.chunk),
                                                  mine.members.size(), has_child);
    std::lock_guard lock(mutex_);
    for (auto it = chains_.begin(); it != chains_.end();) it = it->second->finished() ? chains_.erase(it) : std::next(it);
    // What is left unfinished is a call a lost rank cut (its caller failed it): the oldest go.
    while (chains_.size() >= kChainsKept) chains_.erase(chains_.begin());
    chains_[{f.origin, f.call}] = chain;
    return chain;
  }

  std::shared_ptr<ChainReduction> chain_of(int64_t origin, int64_t call) {
    std::lock_guard lock(mutex_);
    auto it = chains_.find({origin, call});
    return it == chains_.end() ? nullptr : it->second;
  }

  void run_members(RemoteActors::Impl& here, const FanCall& f, const MeshNode& mine,
                   const std::shared_ptr<Reduction>& reduction, const std::shared_ptr<ChainReduction>& chain) {
    if (mine.names.size() != mine.members.size())
      throw ValueError("mesh relay '" + mesh_ + "': a call naming " + std::to_string(mine.members.size()) +
                       " members with " + std::to_string(mine.names.size()) + " names");
    std::shared_ptr<Answers> answers;
    if (f.mode == kFanAnswers) {
      answers = std::make_shared<Answers>();
      answers->left = mine.members.size();
      answers->node = node_;
      answers->origin = f.origin;
      answers->reply = mine.reply;
    }
    for (size_t j = 0; j < mine.members.size(); ++j) {
      WireValue arguments = f.arguments;
      if (!mine.firsts.empty()) arguments.as_list().insert(arguments.as_list().begin(), mine.firsts.at(j));
      const int64_t member = mine.members[j];
      Answer answer;
      if (answers) {
        answer = [answers, member](WireValue&& result, std::exception_ptr error) {
          bool last;
          {
            std::lock_guard lock(answers->mutex);
            answers->results.push_back(WireValue::list({WireValue::integer(member), error ? WireValue() : std::move(result),
                                                        Codec<std::exception_ptr>::encode(error)}));
            last = --answers->left == 0;
          }
          if (last) send_answers(*answers);
        };
      } else if (chain) {
        answer = [chain, name = mine.names.at(j)](WireValue&& result, std::exception_ptr error) {
          chain->member_answered(member_contribution(name, std::move(result), error));
        };
      } else if (reduction) {
        answer = [table = reductions_, reduction, name = mine.names.at(j)](WireValue&& result, std::exception_ptr error) {
          table->contribute(reduction, member_contribution(name, std::move(result), error), 1);
        };
      }
      // The member is on this rank: the call goes straight into its mailbox.
      CallFrame call{answer ? CallKind::request : CallKind::tell, hosted_id(here, mine.names[j]), 0, f.method,
                     std::move(arguments)};
      if (answer) {
        here.ask(here.rank, std::move(call), RemoteActors::Impl::describe(mine.names[j], here.rank, f.method), answer);
        continue;
      }
      try {
        here.post(here.rank, std::move(call));
      } catch (...) {
        std::cerr << "mesh relay '" << mesh_ << "': a send to " << mine.names.at(j) << " failed: "
                  << encode_error(std::current_exception()).message << std::endl;
      }
    }
  }

  // The buffers for a call's streamed arguments, kept until their last chunk.
  std::shared_ptr<Incoming> expect_chunks(const FanCall& f, const MeshNode& mine, const std::shared_ptr<Reduction>& reduction) {
    auto in = std::make_shared<Incoming>();
    in->call = f;
    in->call.nodes.clear();
    in->mine = mine;
    in->reduction = reduction;
    for (const StreamedArgument& a : f.streamed) {
      if (a.position < 0 || static_cast<size_t>(a.position) >= f.arguments.as_list().size())
        throw ValueError("mesh relay '" + mesh_ + "': a streamed argument at " + std::to_string(a.position) +
                         " of a call with " + std::to_string(f.arguments.as_list().size()));
      in->buffers.push_back(buffer(Shape(a.shape.begin(), a.shape.end()), static_cast<DType>(a.dtype)));
      // Written in place, though the spare list shares it (mutable_raw_data would copy it): the
      // members see it only once whole; the version tells what was derived from it before.
      const std::shared_ptr<Storage>& storage = in->buffers.back().storage();
      storage->bump_version();
      in->bytes.push_back(static_cast<uint8_t*>(storage->data()));
      in->left += in->buffers.back().nbytes();
    }
    std::lock_guard lock(mutex_);
    incoming_[{f.origin, f.call}] = in;
    return in;
  }

  // A tensor for a streamed argument: a kept one of its size that nobody holds any more (its
  // pages are already mapped: a fresh 64 MiB costs 16,384 page faults), else a new one, kept.
  Tensor buffer(const Shape& shape, DType dtype) {
    std::lock_guard lock(mutex_);
    const size_t nbytes = itemsize(dtype) * static_cast<size_t>(numel(shape));
    for (Tensor& kept : spare_)
      if (kept.storage()->nbytes() == nbytes && kept.storage().use_count() == 1)
        return Tensor(kept.storage(), dtype, shape, contiguous_strides(shape), 0);
    Tensor made = Tensor::empty(shape, dtype);
    if (spare_.size() == kSpares) spare_.erase(spare_.begin());
    spare_.push_back(made);
    return made;
  }

  // The caller sent a streamed call again, whole, after a loss above this rank: the chunks that
  // went with the loss will not come.
  void finish_from_resend(RemoteActors::Impl& here, const FanCall& f) {
    std::shared_ptr<Incoming> in;
    {
      std::lock_guard lock(mutex_);
      auto it = incoming_.find({f.origin, f.call});
      if (it == incoming_.end()) return;
      in = std::move(it->second);
      incoming_.erase(it);
    }
    in->call.arguments = f.arguments;
    run_members(here, in->call, in->mine, in->reduction, nullptr);
  }

  // The id of an actor this rank hosts, by name (0: none, which its call is refused for): found
  // here, as a lookup in rank 0's directory would wait. Remembered while it is hosted.
  uint64_t hosted_id(RemoteActors::Impl& here, const std::string& name) {
    uint64_t id = 0;
    {
      std::lock_guard lock(mutex_);
      if (auto it = ids_.find(name); it != ids_.end()) id = it->second;
    }
    std::lock_guard lock(here.mutex);
    if (id != 0 && here.hosted.count(id)) return id;
    for (const auto& [candidate, actor] : here.hosted)
      if (actor->name == name) id = candidate;
    std::lock_guard mine(mutex_);
    return ids_[name] = id;
  }

  static void send_answers(Answers& answers) {
    if (auto here = answers.node.lock())
      here->respond(static_cast<int>(answers.origin), static_cast<uint64_t>(answers.reply),
                    WireValue::list(std::move(answers.results)), "mesh relay: ");
  }

  bool first_time(int64_t origin, int64_t call) {
    std::lock_guard lock(mutex_);
    if (!seen_.insert({origin, call}).second) return false;
    order_.push_back({origin, call});
    if (order_.size() > kRemembered) {
      seen_.erase(order_.front());
      order_.pop_front();
    }
    return true;
  }

  static constexpr size_t kRemembered = 4096;  // calls remembered as run: far more than are ever re-sent
  const std::string mesh_;
  const std::weak_ptr<RemoteActors::Impl> node_;
  std::mutex mutex_;  // guards the below
  std::set<std::pair<int64_t, int64_t>> seen_;
  std::deque<std::pair<int64_t, int64_t>> order_;
  std::map<std::pair<int64_t, int64_t>, std::shared_ptr<Incoming>> incoming_;
  std::map<std::string, uint64_t> ids_;  // hosted_id's
  static constexpr size_t kSpares = 4;   // streamed arguments' buffers kept for the next calls
  std::vector<Tensor> spare_;
  std::shared_ptr<Reductions> reductions_ = std::make_shared<Reductions>();
  static constexpr size_t kChainsKept = 64;  // chain reductions in progress, at most
  std::map<std::pair<int64_t, int64_t>, std::shared_ptr<ChainReduction>> chains_;  // by (origin, call)
};

TROUPE_ACTOR(MeshRelay(std::string), "troupe.mesh.relay", &MeshRelay::fan, &MeshRelay::chunk, &MeshRelay::partial,
             &MeshRelay::partial_chunk, &MeshRelay::id);
const bool relay_on_receipt = (run_on_receipt(*find_actor_type("troupe.mesh.relay")), true);

}  // namespace
}  // namespace troupe::net::detail
