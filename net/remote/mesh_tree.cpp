#include "net/remote/mesh_tree.h"

#include <algorithm>
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

namespace {

// A reduction in progress on one relay: its members' answers and its children's partials, then
// one partial to its parent.
struct Reduction {
  std::mutex mutex;
  int waiting = 0;
  Tensor value;
  std::exception_ptr error;  // the first
  int64_t members = 0;
  ReduceOp op = ReduceOp::sum;
  RemoteActor parent;                      // a relay; none: the caller, answered as its request `reply`
  std::weak_ptr<RemoteActors::Impl> node;  // this rank's, to answer the caller
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
    WireValue out = error ? Codec<std::exception_ptr>::encode(error) : WireValue::tensor(value);
    if (!parent.valid()) {
      if (auto here = node.lock())
        here->respond(static_cast<int>(origin), static_cast<uint64_t>(reply),
                      WireValue::list({std::move(out), WireValue::integer(members)}), "mesh relay: ");
      return;
    }
    try {
      parent.send("partial", origin, call, out, members);
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

// A mesh's actor on each rank that hosts its members: it forwards calls down the tree and runs
// them on its members. Its handlers never wait for another rank.
class MeshRelay {
 public:
  explicit MeshRelay(std::string mesh) : mesh_(std::move(mesh)) {}

  void fan(FanCall f) {
    if (f.nodes.empty()) throw ValueError("mesh relay '" + mesh_ + "': a call with no ranks");
    if (!first_time(f.origin, f.call)) return;  // sent again after a loss, and run already
    std::vector<MeshNode> nodes = std::move(f.nodes);
    const MeshNode mine = nodes[0];
    std::optional<RemoteSpan> span;  // the end of the caller's arrow (mesh_call.cpp), in a trace
    if (Profiler::global().recording())
      span.emplace(relay_name(mesh_, static_cast<int>(mine.rank)) + " " + f.method,
                   mine.reply ? Profiler::remote_flow_id(static_cast<int>(f.origin), static_cast<uint64_t>(mine.reply)) : 0);
    const auto children = tree_children(nodes.size(), static_cast<size_t>(f.fanout));
    std::shared_ptr<Reduction> reduction;
    if (f.mode == kFanReduce) {
      reduction = std::make_shared<Reduction>();
      reduction->waiting = static_cast<int>(children.size() + mine.members.size());
      reduction->op = static_cast<ReduceOp>(f.op);
      if (!f.parent.empty()) reduction->parent = actor(f.parent);
      reduction->node = this_node("mesh relay");
      reduction->origin = f.origin;
      reduction->call = f.call;
      reduction->reply = f.reply;
      std::lock_guard lock(reductions_->mutex);
      reductions_->by_call[{f.origin, f.call}] = reduction;
    }
    const std::string parent = f.parent;
    f.parent = relay_name(mesh_, static_cast<int>(mine.rank));
    for (auto [begin, end] : children) {
      f.nodes.assign(nodes.begin() + static_cast<ptrdiff_t>(begin), nodes.begin() + static_cast<ptrdiff_t>(end));
      try {
        actor(relay_name(mesh_, static_cast<int>(f.nodes[0].rank))).send("fan", f);
      } catch (...) {  // its rank is gone: the caller re-sends answers; a reduction fails
        if (reduction) reductions_->contribute(reduction, Codec<std::exception_ptr>::encode(std::current_exception()), 0);
      }
    }
    f.parent = parent;
    run_members(f, mine, reduction);
  }

  void partial(int64_t origin, int64_t call, WireValue value, int64_t count) {
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
  void run_members(const FanCall& f, const MeshNode& mine, const std::shared_ptr<Reduction>& reduction) {
    std::shared_ptr<Answers> answers;
    if (f.mode == kFanAnswers) {
      answers = std::make_shared<Answers>();
      answers->left = mine.members.size();
      answers->node = this_node("mesh relay");
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
      } else if (reduction) {
        answer = [table = reductions_, reduction, name = mine.names.at(j)](WireValue&& result, std::exception_ptr error) {
          if (!error && result.kind() != WireValue::Kind::tensor)
            error = std::make_exception_ptr(ValueError("mesh call_reduce: member '" + name + "' answered " +
                                                       result.describe() + ", not a tensor"));
          table->contribute(reduction, error ? Codec<std::exception_ptr>::encode(error) : std::move(result), 1);
        };
      }
      try {
        actor(mine.names.at(j)).request_encoded(f.method, std::move(arguments), answer);
      } catch (...) {
        if (answer) answer({}, std::current_exception());
        else std::cerr << "mesh relay '" << mesh_ << "': a send to " << mine.names.at(j) << " failed: "
                       << encode_error(std::current_exception()).message << std::endl;
      }
    }
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

  // A handle by name, looked up once (rank 0's directory); a restarted member lands on a rank
  // whose relay has not looked it up before.
  RemoteActor actor(const std::string& name) {
    {
      std::lock_guard lock(mutex_);
      if (auto it = handles_.find(name); it != handles_.end()) return it->second;
    }
    RemoteActor found = lookup(name, std::chrono::seconds(5));
    std::lock_guard lock(mutex_);
    return handles_.emplace(name, found).first->second;
  }

  static constexpr size_t kRemembered = 4096;  // calls remembered as run: far more than are ever re-sent
  const std::string mesh_;
  std::mutex mutex_;  // guards the below (answers and partials arrive on other threads)
  std::map<std::string, RemoteActor> handles_;
  std::set<std::pair<int64_t, int64_t>> seen_;
  std::deque<std::pair<int64_t, int64_t>> order_;
  std::shared_ptr<Reductions> reductions_ = std::make_shared<Reductions>();
};

TROUPE_ACTOR(MeshRelay(std::string), "troupe.mesh.relay", &MeshRelay::fan, &MeshRelay::partial);

}  // namespace
}  // namespace troupe::net::detail
