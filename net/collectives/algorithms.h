#pragma once
// The algorithms, one per file (internal to net/collectives/; the public API is net/collectives.h,
// whose dispatcher validates arguments and picks among them). Every tensor here is contiguous and
// 1-D unless said otherwise; results are fresh tensors or received buffers, never the caller's.
#include <memory>
#include <optional>
#include <vector>

#include "net/collectives/collective_call.h"

namespace troupe::net::collectives {

// A flat all_reduce set up once for one (group, count, dtype, reduce op), in Gloo's shape
// (gloo::AllreduceRing is built with its buffers and plan, then run() many times): what is the
// same from call to call (the partners, the chunk plan) is decided by the constructor; run()
// is one call's hot loop. AllReduce (all_reduce.h) picks one per shape and caches it.
class FlatAllReduce {
 public:
  virtual ~FlatAllReduce() = default;
  // The algorithm's name: the label of the collective's metrics and profiler span.
  virtual const char* name() const = 0;
  // data: this call's contiguous 1-D tensor, of the count and dtype the algorithm was made for.
  virtual Tensor run(CollectiveCall& call, const Tensor& data) = 0;
};
// Chunked, pipelined ring: reduce-scatter then all-gather (ring_all_reduce.cpp). Large tensors.
std::unique_ptr<FlatAllReduce> make_ring_all_reduce(int rank, int size, int64_t count, DType dtype, ReduceOp op);
// Two ranks, large tensors: both send everything at once, in chunks, and reduce as chunks land
// (pair_all_reduce.cpp).
std::unique_ptr<FlatAllReduce> make_pair_all_reduce(int rank, int64_t count, DType dtype, ReduceOp op);
// Recursive doubling, folding the ranks beyond a power of two in first (recursive_doubling.cpp).
// Small tensors: log2(n) exchanges of the whole tensor.
std::unique_ptr<FlatAllReduce> make_recursive_doubling_all_reduce(int rank, int size, ReduceOp op);
// The one of these that suits size ranks and count elements of dtype (all_reduce.cpp).
std::unique_ptr<FlatAllReduce> make_flat_all_reduce(int rank, int size, int64_t count, DType dtype, ReduceOp op);

// Binomial trees rooted at root (binomial_tree.cpp): broadcast returns root's data on every rank;
// reduce returns the reduction on root (and a partial one elsewhere).
Tensor binomial_broadcast(CollectiveCall& call, const Tensor& data, int root);
Tensor binomial_reduce(CollectiveCall& call, const Tensor& data, int root, ReduceOp op);
// Ring all-gather and reduce-scatter (ring_all_gather.cpp, ring_reduce_scatter.cpp): parts[r] is
// rank r's contribution / the inputs destined to rank r (any shapes, one dtype).
std::vector<Tensor> ring_all_gather(CollectiveCall& call, const Tensor& mine);
Tensor ring_reduce_scatter(CollectiveCall& call, const std::vector<Tensor>& inputs, ReduceOp op);
// Direct sends between every pair that exchanges data (direct.cpp).
Tensor direct_scatter(CollectiveCall& call, const std::vector<Tensor>& inputs, int root);
std::vector<Tensor> direct_gather(CollectiveCall& call, const Tensor& mine, int root);
std::vector<Tensor> direct_all_to_all(CollectiveCall& call, const std::vector<Tensor>& inputs);
// Dissemination barrier: ceil(log2 n) rounds of header-only frames (barrier.cpp).
void dissemination_barrier(CollectiveCall& call);

// Two levels (two_level.cpp), for groups whose HostGroups::two_level: within each host, among
// one leader per host, within each host again. The dispatcher numbers the levels' calls on the
// sub-groups when the outer call is made (so async and blocking calls pair up alike on every
// rank); a level this rank takes no part in is empty.
struct TwoLevel {
  std::optional<CollectiveCall> within_first, leaders, within_last;
  std::optional<uint64_t> shm_ticket, shm_ticket_last;  // the within levels' turns on the host's shared memory
  Deadline deadline;                   // the outer call's, given to every level
  std::chrono::microseconds poll{};    // the outer call's receive poll (CollectiveCall::poll), likewise
};
Tensor two_level_all_reduce(TwoLevel& levels, const Tensor& data, ReduceOp op, int group_size);
// Each level's op.root is the rank it broadcasts from.
Tensor two_level_broadcast(TwoLevel& levels, const Tensor& data);

}  // namespace troupe::net::collectives
