// Ring all-reduce (Gloo/NCCL style): the tensor is cut into one segment per rank, each segment
// into chunks. Reduce-scatter: in n-1 steps every segment travels once around the ring, each rank
// adding its own part, until rank r holds segment r+1 fully reduced. All-gather: n-1 more steps
// pass each finished segment around. Every rank sends and receives 2(n-1)/n of the tensor, the
// bandwidth optimum.
//
// Pipelining comes from the chunk-level data flow: a chunk is forwarded the moment it has been
// reduced (sends never block and are zero-copy), so while this rank reduces chunk k, chunk k+1 is
// arriving and chunk k-1 is on its way to the right. Received chunks are reduced in place (they
// are uniquely owned buffers) and forwarded as they are; only the final reduction writes into the
// result, and all-gathered chunks are copied into it once.
//
// Set up once per (group, count, dtype, op): the chunks' ranges stay with the object; run() is the
// two phases. The result is a fresh tensor per call (the caller keeps it); from 1 MiB up the host
// allocator hands back a freed block of the same size, already paged in (devices/host_allocator.h).
#include <cstring>
#include <deque>

#include "net/collectives/algorithms.h"
#include "net/collectives/reduce_kernels.h"

namespace troupe::net::collectives {

namespace {

// Large ZeroMQ messages are slow (every fresh page of a receive buffer faults), and smaller chunks
// pipeline better; much smaller ones pay per-message overhead.
constexpr int64_t kRingChunkBytes = 1 << 20;
constexpr int64_t kRingWindow = 4;  // chunks of step 0 in flight ahead of the first receive

struct Range {
  int64_t begin, end;
};

class RingAllReduce final : public FlatAllReduce {
 public:
  RingAllReduce(int rank, int size, int64_t count, DType dtype, ReduceOp op);
  const char* name() const override { return "ring"; }
  Tensor run(CollectiveCall& call, const Tensor& data) override;

 private:
  const Range& chunk(int segment, int64_t k) const { return chunks_[static_cast<size_t>(segment * count_of_chunks_ + k)]; }

  int rank_, size_;
  int64_t count_;
  DType dtype_;
  ReduceOp op_;
  int64_t count_of_chunks_;  // per segment, the same on every rank (it depends on count and n only)
  std::vector<Range> chunks_;  // segment s's chunk k at s * count_of_chunks_ + k
};

// Segment s is [count*s/n, count*(s+1)/n); each is cut into near-equal chunks.
RingAllReduce::RingAllReduce(int rank, int size, int64_t count, DType dtype, ReduceOp op)
    : rank_(rank), size_(size), count_(count), dtype_(dtype), op_(op) {
  const int n = size;
  const int64_t largest_segment = (count + n - 1) / n;
  const int64_t chunk_elems = std::max<int64_t>(1, kRingChunkBytes / static_cast<int64_t>(itemsize(dtype)));
  count_of_chunks_ = std::max<int64_t>(1, (largest_segment + chunk_elems - 1) / chunk_elems);
  for (int segment = 0; segment < n; ++segment) {
    const int64_t b = count * segment / n, e = count * (segment + 1) / n;
    for (int64_t k = 0; k < count_of_chunks_; ++k)
      chunks_.push_back({b + (e - b) * k / count_of_chunks_, b + (e - b) * (k + 1) / count_of_chunks_});
  }
}

Tensor RingAllReduce::run(CollectiveCall& call, const Tensor& data) {
  const int n = size_, r = rank_;
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  const DType dtype = dtype_;
  const ReduceOp op = op_;
  const size_t item = itemsize(dtype);
  const ReduceOp combine = op == ReduceOp::avg ? ReduceOp::sum : op;
  const int64_t chunks = count_of_chunks_;

  Tensor result = Tensor::empty({count_}, dtype);
  // Taken once: later sends share result's storage, and writing through mutable_raw_data() again
  // would copy it.
  auto* out = static_cast<char*>(result.mutable_raw_data());
  const auto* in = static_cast<const char*>(data.raw_data());

  // Reduce-scatter. Step 0 sends this rank's own segment r (views: no copy), kRingWindow chunks ahead
  // of what step 1 has received: queueing the whole segment at once would make the receiver
  // buffer all of it (fresh, page-faulting memory) before reducing any. Frames must leave in the
  // order the right neighbour consumes them, so later steps' sends wait in `later` until the own
  // segment is out.
  int64_t own_sent = 0;
  std::deque<Tensor> later;
  auto send = [&](const Tensor& t) {
    if (own_sent < chunks) later.push_back(t);
    else call.send(right, t);
  };
  auto send_own_through = [&](int64_t k) {
    for (; own_sent < std::min(k, chunks); ++own_sent) {
      const Range& c = chunk(r, own_sent);
      call.send(right, data.slice(0, c.begin, c.end));
    }
    if (own_sent == chunks)
      for (; !later.empty(); later.pop_front()) call.send(right, later.front());
  };
  send_own_through(kRingWindow);
  for (int step = 1; step < n; ++step) {
    const int segment = (r - step + n) % n;  // reduced so far over ranks r-step .. r-1
    const bool last = step == n - 1;
    for (int64_t k = 0; k < chunks; ++k) {
      if (step == 1) send_own_through(k + 1 + kRingWindow);
      const Range& c = chunk(segment, k);
      Tensor got = call.recv(left);
      const size_t elems = static_cast<size_t>(c.end - c.begin);
      if (last) {
        // Fully reduced: straight into the result, which the all-gather then sends on.
        reduce_buffers(out + c.begin * item, got.raw_data(), in + c.begin * item, elems, dtype, combine);
        // avg divides here, before the chunk leaves, so every rank gets the same bits.
        if (op == ReduceOp::avg) divide_buffer(out + c.begin * item, elems, dtype, n);
        send(result.slice(0, c.begin, c.end));
      } else {
        void* acc = got.mutable_raw_data();  // uniquely owned: no copy
        reduce_buffers(acc, acc, in + c.begin * item, elems, dtype, combine);
        send(got);
      }
    }
  }

  // All-gather: segment (r+1) is done here; receive the others, forwarding all but the last.
  for (int step = 1; step < n; ++step) {
    const int segment = (r - step + 1 + n) % n;
    for (int64_t k = 0; k < chunks; ++k) {
      const Range& c = chunk(segment, k);
      Tensor got = call.recv(left);
      if (step < n - 1) call.send(right, got);
      std::memcpy(out + c.begin * item, got.raw_data(), static_cast<size_t>(c.end - c.begin) * item);
    }
  }
  return result;
}

}  // namespace

std::unique_ptr<FlatAllReduce> make_ring_all_reduce(int rank, int size, int64_t count, DType dtype, ReduceOp op) {
  return std::make_unique<RingAllReduce>(rank, size, count, dtype, op);
}

}  // namespace troupe::net::collectives
