#pragma once
// Mesh calls along a tree of ranks (internal to net/remote/mesh*.cpp). A call reaches the ranks that
// host the called members through a binomial tree rooted at the caller: each rank's relay actor
// ("troupe.mesh.relay") forwards the call to the roots of its subtrees first (largest first), then
// calls its own members; the answers go to the caller in one message per rank (the answer to a
// request the caller made for that rank, so that a lost rank fails it as it fails any request), or,
// for a reduction, up the same tree, each relay combining its members' answers with its children's.
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
  std::vector<int64_t> members;     // whole-mesh indices
  std::vector<std::string> names;   // their actors' names
  std::vector<WireValue> firsts;    // scatter: each member's first argument; else empty
  int64_t reply = 0;                // the caller's request its answers go to (kFanAnswers)
  TROUPE_FIELDS(rank, members, names, firsts, reply)
};

// The message a relay gets: the call, and the subtree it roots (nodes[0] is its own rank).
struct FanCall {
  int64_t origin = 0;          // the caller's rank; with `call`, what makes a call unique
  int64_t call = 0;
  std::string method;
  WireValue arguments;         // a list (after each member's first, for a scatter)
  int64_t mode = 0;            // kFanAnswers, kFanReduce or kFanTell
  int64_t op = 0;              // ReduceOp, for a reduction
  std::string parent;          // a reduction's partial goes to this relay; empty: to the caller,
  int64_t reply = 0;           // as the answer to this request of its
  int64_t fanout = 0;          // the tree's shape (tree_children)
  std::vector<MeshNode> nodes;
  TROUPE_FIELDS(origin, call, method, arguments, mode, op, parent, reply, fanout, nodes)
};
inline constexpr int64_t kFanAnswers = 0, kFanReduce = 1, kFanTell = 2;

// The subtrees nodes[0] forwards to in a tree over n nodes: half-open ranges of node positions,
// each rooted at its first. fanout 0: a binomial tree, largest first (n = 8: [4,8), [2,4), [1,2)),
// floor(log2 n) hops deep, the root sending ceil(log2 n) copies: for large arguments. fanout k:
// the other n - 1 split into k ranges (n = 9, k = 8: eight of one), log_k(n) hops: for small
// calls, where every hop is a wake-up of a process and copies cost nothing.
std::vector<std::pair<size_t, size_t>> tree_children(size_t n, size_t fanout = 0);
// The fanout for a call whose tensors hold `bytes`: k-ary up to kSmallCall bytes, else binomial.
inline constexpr size_t kSmallCall = 64 << 10, kSmallFanout = 8;

// a op b for two answers of a reduction (avg sums; the caller divides). ShapeError / DTypeError
// when they differ.
Tensor combine(const Tensor& a, const Tensor& b, ReduceOp op);

// The name of a mesh's relay on a rank: "<mesh>.relay/<rank>".
std::string relay_name(const std::string& mesh, int rank);

}  // namespace troupe::net::detail
