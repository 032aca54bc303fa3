// Calls to a mesh (mesh.h, "Calls"): the caller's half. The call goes down the tree of the ranks
// that host the called members (mesh_tree.cpp); each of those ranks answers a request this rank
// made for it (or, for a reduction, each subtree's root does), on whichever thread receives it
// here, which completes the futures: a waiting thread that receives gets its answers with no hand-off.
#include <algorithm>
#include <chrono>
#include <optional>

#include "actors/observe/profiler.h"
#include "devices/error_kinds.h"
#include "devices/ops.h"
#include "net/remote/endpoint.h"
#include "net/remote/mesh_state.h"

namespace troupe::net {

using detail::FanCall;
using detail::MeshNode;
using detail::MeshPendingCall;
using detail::MeshState;

namespace {

WireValue with_first(const WireValue& arguments, const std::vector<WireValue>& scattered, size_t position) {
  WireValue out = arguments;
  if (!scattered.empty()) out.as_list().insert(out.as_list().begin(), scattered[position]);
  return out;
}

size_t position_of(const MeshPendingCall& call, size_t member) {
  auto it = std::find(call.members.begin(), call.members.end(), member);
  if (it == call.members.end()) throw ValueError("mesh: an answer for member " + std::to_string(member) + ", not called");
  return static_cast<size_t>(it - call.members.begin());
}

}  // namespace

namespace detail {

std::string MeshState::describe(size_t member, int rank, std::string_view method) const {
  return "mesh '" + name + "': member " + members.at(member).point.str() + " ('" + members.at(member).name +
         "') on rank " + std::to_string(rank) + ": " + std::string(method) + ": ";
}

RemoteActor MeshState::relay(int rank) {
  std::lock_guard spawn(spawning);
  {
    std::lock_guard lock(mutex);
    if (auto it = relays.find(rank); it != relays.end()) return it->second;
  }
  SpawnOptions options;
  options.rank = rank;
  options.name = relay_name(name, rank);
  RemoteActor made = spawn_on(options, "troupe.mesh.relay", name);
  std::weak_ptr<MeshState> weak = shared_from_this();
  made.on_down([weak, rank](std::exception_ptr why) {
    if (!why) return;  // stopped with the mesh
    if (auto state = weak.lock()) state->rank_lost(rank, why);
  });
  const auto id = static_cast<uint64_t>(made.request<int64_t>("id").get());
  std::lock_guard lock(mutex);
  relay_ids[rank] = id;
  return relays.emplace(rank, made).first->second;
}

uint64_t MeshState::relay_id(int rank) {
  relay(rank);
  std::lock_guard lock(mutex);
  return relay_ids.at(rank);
}

uint64_t MeshState::await_reply(int64_t call, int rank, bool reduce) {
  auto node = this_node("Mesh::call");
  std::weak_ptr<MeshState> weak = shared_from_this();
  auto answer = [weak, call, rank, reduce](WireValue&& result, std::exception_ptr error) {
    auto state = weak.lock();
    if (!state) return;
    if (error) return state->reply_failed(call, rank, error);
    if (!reduce) return state->on_answers(call, result);
    const WireValue::List& items = result.as_list();  // [tensor or error, members]
    state->on_partial(call, items.at(0), items.at(1).as_int());
  };
  std::lock_guard lock(node->mutex);
  const uint64_t id = node->next_request++;
  node->pending.emplace(id, RemoteActors::Impl::Pending{rank, "", std::move(answer)});
  return id;
}

void MeshState::drop_replies(MeshPendingCall& call) {
  auto node = this_node("Mesh::call");
  for (uint64_t id : call.replies) node->take_pending(id);
  call.replies.clear();
}

void MeshState::on_answers(int64_t call, const WireValue& results) {
  std::vector<std::tuple<size_t, WireValue, std::exception_ptr>> ready;
  MemberAnswer answer;
  {
    std::lock_guard lock(mutex);
    auto it = pending.find(call);
    if (it == pending.end()) return;  // failed already
    MeshPendingCall& c = it->second;
    for (const WireValue& item : results.as_list()) {
      const WireValue::List& fields = item.as_list();
      const size_t p = position_of(c, static_cast<size_t>(fields.at(0).as_int()));
      if (c.answered[p]) continue;  // failed by a loss before it came
      c.answered[p] = true;
      --c.left;
      ready.emplace_back(p, fields.at(1), Codec<std::exception_ptr>::decode(fields.at(2)));
    }
    answer = c.answer;
    if (c.left == 0) pending.erase(it);
  }
  for (auto& [p, result, error] : ready) answer(p, std::move(result), error);
}

void MeshState::on_partial(int64_t call, const WireValue& value, int64_t count) {
  Answer done;
  WireValue out;
  std::exception_ptr failed;
  {
    std::lock_guard lock(mutex);
    auto it = pending.find(call);
    if (it == pending.end()) return;  // failed already
    MeshPendingCall& c = it->second;
    try {
      if (value.kind() != WireValue::Kind::tensor) std::rethrow_exception(Codec<std::exception_ptr>::decode(value));
      c.reduced = c.reduced.defined() ? combine(c.reduced, value.as_tensor(), c.op) : value.as_tensor();
      c.reduced_members += count;
    } catch (...) {
      failed = with_context("mesh '" + name + "': call_reduce(" + c.method + "): ", std::current_exception());
    }
    if (!failed && --c.partials_left > 0) return;
    done = std::move(c.done);
    drop_replies(c);
    if (!failed) {
      out = WireValue::tensor(c.op == ReduceOp::avg ? mul(c.reduced, 1.0 / static_cast<double>(c.reduced_members))
                                                   : c.reduced);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - c.started).count();
      reduce_ways[c.method].measured(c.chained, seconds, c.reduced.device().is_cpu() ? c.reduced.nbytes() : 0);
    }
    pending.erase(it);
  }
  done(std::move(out), failed);
}

void MeshState::on_direct(int64_t call, size_t position, WireValue&& result, std::exception_ptr error) {
  bool reduce;
  size_t member;
  std::string method;
  {
    std::lock_guard lock(mutex);
    auto it = pending.find(call);
    if (it == pending.end()) return;
    reduce = it->second.reduce;
    member = it->second.members.at(position);
    method = it->second.method;
  }
  const int rank = members[member].actor.rank();
  if (error) error = with_context(describe(member, rank, method), error);
  if (reduce) {
    if (!error && result.kind() != WireValue::Kind::tensor)
      error = std::make_exception_ptr(ValueError(describe(member, rank, method) + "answered " + result.describe() +
                                                 ", not a tensor"));
    return on_partial(call, error ? Codec<std::exception_ptr>::encode(error) : result, 1);
  }
  on_answers(call, WireValue::list({WireValue::list({WireValue::integer(static_cast<int64_t>(member)),
                                                     error ? WireValue() : std::move(result),
                                                     Codec<std::exception_ptr>::encode(error)})}));
}

void MeshState::send_fan(FanCall fan, std::vector<MeshNode> nodes) {
  const int64_t root = nodes.at(0).rank;
  fan.nodes = std::move(nodes);
  relay(static_cast<int>(root)).send("fan", fan);
}

}  // namespace detail

void Mesh::start(std::string_view method, WireValue arguments, std::vector<WireValue> scattered, Mode mode, ReduceOp op,
                 detail::MemberAnswer answer) const {
  if (!state_) throw ValueError("Mesh: the handle is empty");
  MeshState& state = *state_;
  const int me = actors_rank();
  if (state.calls) state.calls->add();
  // In a trace: the call as one span here, with an arrow to each rank's relay that runs it.
  std::optional<ProfileScope> span;
  if (Profiler::global().recording())
    span.emplace("mesh " + state.name + "." + std::string(method), std::to_string(members_.size()) + " members");
  // Where each member runs now: through its rank's relay, or, while its rank is lost (a restart
  // under way), directly through its handle, which holds the call until the member is back.
  std::map<int, std::vector<size_t>> by_rank;  // rank -> positions
  std::map<int, uint64_t> relay_ids;          // rank -> its relay's actor id
  std::vector<int> routed(members_.size(), -1);
  for (size_t p = 0; p < members_.size(); ++p) {
    const int r = state.members[members_[p]].actor.rank();
    bool lost;
    {
      std::lock_guard lock(state.mutex);
      lost = state.lost.count(r) > 0;
    }
    if (lost) continue;
    if (!relay_ids.count(r)) {
      try {
        relay_ids[r] = state.relay_id(r);
      } catch (const CommError&) {  // lost just now
        continue;
      }
    }
    routed[p] = r;
    by_rank[r].push_back(p);
  }
  // The tree's nodes: this rank first when it hosts members (its relay roots the tree), then by rank.
  std::vector<MeshNode> nodes;
  auto add_node = [&](int r, const std::vector<size_t>& positions) {
    MeshNode node;
    node.rank = r;
    node.relay = static_cast<int64_t>(relay_ids.at(r));
    for (size_t p : positions) {
      node.members.push_back(static_cast<int64_t>(members_[p]));
      node.names.push_back(state.members[members_[p]].name);
      if (!scattered.empty()) node.firsts.push_back(scattered[p]);
    }
    nodes.push_back(std::move(node));
  };
  if (auto it = by_rank.find(me); it != by_rank.end()) add_node(me, it->second);
  for (const auto& [r, positions] : by_rank)
    if (r != me) add_node(r, positions);
  const bool rooted_here = !nodes.empty() && nodes[0].rank == me;
  // Small calls fan out wide (few hops), large ones down a binomial tree (few copies per sender).
  size_t bytes = 0;
  std::vector<Tensor> tensors;
  arguments.collect_tensors(tensors);
  for (const WireValue& first : scattered) first.collect_tensors(tensors);
  for (const Tensor& t : tensors) bytes += t.nbytes();
  // Large host tensors among the arguments go after the call, in chunks down a chain.
  std::vector<detail::StreamedArgument> streamed;
  std::vector<Tensor> streamed_tensors;
  if (state.chunk_bytes > 0 && arguments.kind() == WireValue::Kind::list)
    for (size_t i = 0; i < arguments.as_list().size(); ++i) {
      const WireValue& a = arguments.as_list()[i];
      if (a.kind() != WireValue::Kind::tensor) continue;
      const Tensor& t = a.as_tensor();
      if (!t.device().is_cpu() || t.nbytes() < 2 * state.chunk_bytes) continue;
      streamed.push_back({static_cast<int64_t>(i), static_cast<int64_t>(t.dtype()),
                          std::vector<int64_t>(t.shape().begin(), t.shape().end())});
      streamed_tensors.push_back(host_contiguous(t));
    }
  // A reduction whose answers were large may come back up a chain in chunks (ReduceWays).
  bool chained_reduce = false;
  if (mode == Mode::reduce && streamed.empty()) {
    std::lock_guard lock(state.mutex);
    auto it = state.reduce_ways.find(method);
    chained_reduce = it != state.reduce_ways.end() && it->second.chain_next(state.chunk_bytes);
  }
  const size_t fanout = !streamed.empty() || chained_reduce ? detail::kChainFanout
                        : bytes <= detail::kSmallCall       ? detail::kSmallFanout
                                                            : 0;
  const auto subtrees = detail::tree_children(nodes.size() + 1, fanout);  // position 0: this rank, when it hosts none

  FanCall fan;
  fan.origin = me;
  fan.method = std::string(method);
  fan.arguments = arguments;
  fan.mode = mode == Mode::answers ? detail::kFanAnswers : mode == Mode::reduce ? detail::kFanReduce : detail::kFanTell;
  fan.op = static_cast<int64_t>(op);
  fan.fanout = static_cast<int64_t>(fanout);
  fan.chunk = chained_reduce ? static_cast<int64_t>(state.chunk_bytes) : 0;
  std::vector<size_t> direct;
  for (size_t p = 0; p < members_.size(); ++p)
    if (routed[p] < 0) direct.push_back(p);
  {
    std::lock_guard lock(state.mutex);
    fan.call = state.next_call++;
  }
  const int64_t call = fan.call;
  std::vector<uint64_t> replies;  // requests this rank awaits: one per rank, or per subtree (reduce)
  if (mode == Mode::answers) {
    for (MeshNode& node : nodes) replies.push_back(node.reply = state.await_reply(call, static_cast<int>(node.rank), false));
  } else if (span) {  // a request number no answer comes for: the id of the arrow to each rank's relay
    auto here = this_node("Mesh::call");
    std::lock_guard lock(here->mutex);
    for (MeshNode& node : nodes) node.reply = static_cast<int64_t>(here->next_request++);
  }
  auto subtree = [&](size_t begin, size_t end) {  // positions in the tree with this rank at 0
    return std::vector<MeshNode>(nodes.begin() + static_cast<ptrdiff_t>(begin - 1),
                                 nodes.begin() + static_cast<ptrdiff_t>(end - 1));
  };
  std::vector<std::vector<MeshNode>> sends;
  if (rooted_here) sends.push_back(nodes);
  else if (!nodes.empty())
    for (auto [begin, end] : subtrees) sends.push_back(subtree(begin, end));
  std::vector<uint64_t> send_replies;
  if (mode == Mode::reduce)
    for (const auto& part : sends) replies.push_back(state.await_reply(call, static_cast<int>(part[0].rank), true));
  if (mode == Mode::reduce) send_replies = replies;
  {
    std::lock_guard lock(state.mutex);
    if (mode != Mode::tell) {
      MeshPendingCall c;
      c.method = fan.method;
      c.reduce = mode == Mode::reduce;
      c.op = op;
      c.chained = chained_reduce;
      c.started = std::chrono::steady_clock::now();
      c.members = members_;
      c.routed = routed;
      c.answered.assign(members_.size(), false);
      c.left = members_.size();
      if (c.reduce) c.done = [answer](WireValue&& result, std::exception_ptr error) { answer(0, std::move(result), error); };
      else c.answer = answer;
      c.partials_left = static_cast<int>(sends.size() + direct.size());
      c.fan = fan;
      c.nodes = nodes;
      c.replies = replies;
      state.pending.emplace(fan.call, std::move(c));
    }
  }
  if (span)
    for (const MeshNode& node : nodes)
      if (node.reply)
        Profiler::record_remote_call("mesh call " + std::string(method), Profiler::remote_flow_id(me, node.reply));
  for (size_t i = 0; i < sends.size(); ++i) {
    auto& part = sends[i];
    const int r = static_cast<int>(part[0].rank);
    if (!send_replies.empty()) fan.reply = static_cast<int64_t>(send_replies[i]);
    try {
      if (streamed.empty()) {
        state.send_fan(fan, std::move(part));
        continue;
      }
      FanCall head = fan;  // the call without the streamed tensors, which follow it
      head.streamed = streamed;
      for (const detail::StreamedArgument& a : streamed) head.arguments.as_list()[static_cast<size_t>(a.position)] = WireValue();
      RemoteActor root = state.relay(r);
      state.send_fan(std::move(head), std::move(part));
      for (size_t k = 0; k < streamed_tensors.size(); ++k) {
        const Tensor& t = streamed_tensors[k];  // contiguous: its bytes, viewed without a copy
        const int64_t base = static_cast<const char*>(t.raw_data()) - static_cast<const char*>(t.storage()->data());
        for (auto [begin, end] : detail::chunk_ranges(t.nbytes(), state.chunk_bytes)) {
          const int64_t n = static_cast<int64_t>(end - begin);
          root.send("chunk", fan.origin, call, static_cast<int64_t>(k), static_cast<int64_t>(begin),
                    Tensor(t.storage(), DType::u8, {n}, {1}, base + static_cast<int64_t>(begin)));
        }
      }
    } catch (const CommError&) {  // its rank was lost meanwhile: rank_lost fails its members and re-sends the rest
      state.rank_lost(r, std::current_exception());
    }
  }
  std::weak_ptr<MeshState> weak = state_;
  for (size_t p : direct) {
    detail::Answer reply;
    if (mode != Mode::tell)
      reply = [weak, call, p](WireValue&& result, std::exception_ptr error) {
        if (auto s = weak.lock()) s->on_direct(call, p, std::move(result), error);
      };
    state.members[members_[p]].actor.request_encoded(method, with_first(arguments, scattered, p), reply);
  }
}

Future<Tensor> Mesh::start_reduce(ReduceOp op, std::string_view method, WireValue arguments) const {
  if (op == ReduceOp::none) throw ValueError("mesh '" + name() + "': call_reduce(" + std::string(method) + "): no reduce op");
  auto reply = std::make_shared<detail::MeshReply<Tensor>>();
  Future<Tensor> future(reply);
  start(method, std::move(arguments), {}, Mode::reduce, op,
        [reply](size_t, WireValue&& result, std::exception_ptr error) {
          if (error) return reply->set_exception(error);
          reply->set_value(result.as_tensor());
        });
  return future;
}

Future<Tensor> Mesh::start_gather(std::string_view method, WireValue arguments) const {
  struct Gather {
    std::mutex mutex;
    std::vector<Tensor> parts;
    size_t left;
    bool failed = false;
    std::shared_ptr<detail::MeshReply<Tensor>> promise = std::make_shared<detail::MeshReply<Tensor>>();
  };
  auto gather = std::make_shared<Gather>();
  gather->parts.resize(members_.size());
  gather->left = members_.size();
  Future<Tensor> future(gather->promise);
  Shape outer;
  for (const MeshDim& d : shape_) outer.push_back(d.size);
  const std::string what = "mesh '" + name() + "': call_gather(" + std::string(method) + "): ";
  start(method, std::move(arguments), {}, Mode::answers, ReduceOp::none,
        [gather, outer, what](size_t i, WireValue&& result, std::exception_ptr error) {
          std::unique_lock lock(gather->mutex);
          if (gather->failed) return;
          if (!error && result.kind() != WireValue::Kind::tensor)
            error = std::make_exception_ptr(ValueError(what + "member " + std::to_string(i) + " answered " +
                                                       result.describe() + ", not a tensor"));
          if (error) {
            gather->failed = true;
            lock.unlock();
            return gather->promise->set_exception(error);
          }
          gather->parts[i] = result.as_tensor();
          if (--gather->left > 0) return;
          try {
            Tensor stacked = stack(gather->parts);
            Shape shape = outer;
            for (int64_t d : gather->parts[0].shape()) shape.push_back(d);
            gather->promise->set_value(stacked.reshape(shape));
          } catch (...) {
            gather->promise->set_exception(with_context(what, std::current_exception()));
          }
        });
  return future;
}

}  // namespace troupe::net
