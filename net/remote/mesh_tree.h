#pragma once
// Mesh calls along a tree of ranks (internal to net/remote/mesh*.cpp). A call reaches the ranks that
// host the called members through a binomial tree rooted at the caller: each rank's relay actor
// ("troupe.mesh.relay") forwards the call to the roots of its subtrees first (largest first), then
// calls its own members; the answers go to the caller in one message per rank (the answer to a
// request the caller made for that rank, so that a lost rank fails it as it fails any request), or,
// for a reduction, up the same tree, each relay combining its members' answers with its children's.
// A relay runs on the thread that receives the call (ActorType::on_receipt): a hop costs a frame,
// not a frame and a wake-up of a scheduler's thread. So it never looks a name up in rank 0's
// directory: the caller puts each relay's id in the call, and a relay finds its members here.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "net/frame.h"
#include "net/remote/value.h"

namespace troupe::net::detail {

// One rank of a call's tree and the members it runs.
struct MeshNode {
  int64_t rank = 0;
  int64_t relay = 0;                // the id of the mesh's relay on that rank
  std::vector<int64_t> members;     // whole-mesh indices
  std::vector<std::string> names;   // their actors' names
  std::vector<WireValue> firsts;    // scatter: each member's first argument; else empty
  int64_t reply = 0;                // the caller's request its answers go to (kFanAnswers)
  TROUPE_FIELDS(rank, relay, members, names, firsts, reply)
};

// A large tensor argument that comes after its call, in chunks ("chunk" to the relay, each one
// forwarded down the tree as it arrives): the call's place for it, and what it is.
struct StreamedArgument {
  int64_t position = 0;  // in FanCall::arguments, which holds none there
  int64_t dtype = 0;     // a DType
  std::vector<int64_t> shape;
  TROUPE_FIELDS(position, dtype, shape)
};

// The message a relay gets: the call, and the subtree it roots (nodes[0] is its own rank).
struct FanCall {
  int64_t origin = 0;          // the caller's rank; with `call`, what makes a call unique
  int64_t call = 0;
  std::string method;
  WireValue arguments;         // a list (after each member's first, for a scatter)
  int64_t mode = 0;            // kFanAnswers, kFanReduce or kFanTell
  int64_t op = 0;              // ReduceOp, for a reduction
  int64_t parent_rank = -1;    // a reduction's partial goes to the relay parent_relay there;
  int64_t parent_relay = 0;    // -1: to the caller,
  int64_t reply = 0;           // as the answer to this request of its
  int64_t fanout = 0;          // the tree's shape (tree_children)
  std::vector<MeshNode> nodes;
  std::vector<StreamedArgument> streamed;  // the members' call starts once they are all here
  int64_t chunk = 0;           // a reduction up a chain in chunks of this many bytes (mesh_chain_reduce.h)
  TROUPE_FIELDS(origin, call, method, arguments, mode, op, parent_rank, parent_relay, reply, fanout, nodes, streamed,
                chunk)
};
inline constexpr int64_t kFanAnswers = 0, kFanReduce = 1, kFanTell = 2;

// The subtrees nodes[0] forwards to in a tree over n nodes: half-open ranges of node positions,
// each rooted at its first. fanout 0: a binomial tree, largest first (n = 8: [4,8), [2,4), [1,2)),
// floor(log2 n) hops deep, the root sending ceil(log2 n) copies: for large arguments. fanout k:
// the other n - 1 split into k ranges (n = 9, k = 8: eight of one), log_k(n) hops: for small
// calls, where every hop is a wake-up of a process and copies cost nothing.
std::vector<std::pair<size_t, size_t>> tree_children(size_t n, size_t fanout = 0);
// The fanout for a call whose tensors hold `bytes`: k-ary up to kSmallCall bytes, else binomial;
// a call with streamed arguments goes down a chain (fanout 1), where every rank receives and sends
// each chunk once, so the time is one transfer of the whole plus one chunk per hop.
inline constexpr size_t kSmallCall = 64 << 10, kSmallFanout = 8, kChainFanout = 1;

// The chunks of a streamed argument of `bytes`: [offset, end) each, `chunk` bytes but the last.
std::vector<std::pair<size_t, size_t>> chunk_ranges(size_t bytes, size_t chunk);

// a op b for two answers of a reduction (avg sums; the caller divides). ShapeError / DTypeError
// when they differ.
Tensor combine(const Tensor& a, const Tensor& b, ReduceOp op);

// The name of a mesh's relay on a rank: "<mesh>.relay/<rank>".
std::string relay_name(const std::string& mesh, int rank);

}  // namespace troupe::net::detail
