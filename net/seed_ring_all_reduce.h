#pragma once
// The hand-written ring all-reduce (sum), built only from point-to-point
// isend/recv: a teaching version of what net/collectives/ring_all_reduce.cpp does with pipelined
// chunks, zero-copy forwarding and in-place reduction. Every rank calls it; tensor becomes the sum.
//
//   Tensor t = Tensor::ones({1000});
//   troupe::net::seed_ring_all_reduce(*world, t);   // every element == world->size()
//
// The tensor is cut into one chunk per rank. Reduce-scatter: in step s every rank sends chunk
// (rank - s) to its right neighbour and adds the chunk (rank - s - 1) arriving from its left, so
// after size-1 steps rank r holds chunk r+1 summed over all ranks. All-gather: size-1 more steps
// pass the finished chunks around the ring. It uses p2p tag kSeedRingTag on the group.
#include <cstdint>

#include "devices/tensor.h"
#include "net/process_group.h"

namespace troupe::net {

inline constexpr int64_t kSeedRingTag = 0x5eed;

void seed_ring_all_reduce(ProcessGroup& group, Tensor& tensor);

}  // namespace troupe::net
