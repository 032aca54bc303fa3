// Recursive doubling all-reduce for small tensors: in round k every rank exchanges its whole
// partial result with the rank whose number differs in bit k, so after log2(p) rounds all p ranks
// hold the full reduction: log2(p) message latencies instead of the ring's 2(n-1).
//
// A world that is not a power of two first folds its extra ranks in: with p the largest power of
// two <= n and e = n - p, rank p+i (i < e) sends its tensor to rank i and waits; rank i reduces it
// in, takes part in the doubling among ranks 0..p-1, then sends the result back to p+i.
//
// Both partners combine the same two values (a op b on one side, b op a on the other), and every
// op here is commutative in IEEE arithmetic, so every rank ends with the same bits.
//
// Nothing to set up but the partners: every round reduces into the buffer just received, which
// becomes the result.
#include <bit>

#include "net/collectives/algorithms.h"
#include "net/collectives/reduce_kernels.h"

namespace troupe::net::collectives {

namespace {

class RecursiveDoublingAllReduce final : public FlatAllReduce {
 public:
  RecursiveDoublingAllReduce(int rank, int size, ReduceOp op)
      : r_(rank), n_(size), p_(static_cast<int>(std::bit_floor(static_cast<unsigned>(size)))), op_(op) {}
  const char* name() const override { return "recursive_doubling"; }
  Tensor run(CollectiveCall& call, const Tensor& data) override;

 private:
  int r_, n_;
  int p_;  // the largest power of two <= n_
  ReduceOp op_;
};

Tensor RecursiveDoublingAllReduce::run(CollectiveCall& call, const Tensor& data) {
  const int n = n_, r = r_, p = p_;
  const int extra = n - p;
  const ReduceOp op = op_;
  const DType dtype = data.dtype();
  const size_t count = static_cast<size_t>(data.numel());
  const ReduceOp combine = op == ReduceOp::avg ? ReduceOp::sum : op;

  if (r >= p) {  // folded in: hand the tensor to r - p, get the result back
    call.send(r - p, data);
    return call.recv(r - p);
  }
  Tensor acc = data;
  auto reduce_in = [&](Tensor got) {
    // Into the received buffer (uniquely owned, so no copy) rather than into acc, which may be the
    // caller's bytes or a buffer still being sent.
    void* out = got.mutable_raw_data();
    reduce_buffers(out, acc.raw_data(), out, count, dtype, combine);
    acc = std::move(got);
  };
  if (r < extra) reduce_in(call.recv(r + p));
  for (int mask = 1; mask < p; mask <<= 1) {
    const int partner = r ^ mask;
    call.send(partner, acc);
    reduce_in(call.recv(partner));
  }
  if (op == ReduceOp::avg) divide_buffer(acc.mutable_raw_data(), count, dtype, n);
  if (r < extra) call.send(r + p, acc);
  return acc;
}

}  // namespace

std::unique_ptr<FlatAllReduce> make_recursive_doubling_all_reduce(int rank, int size, ReduceOp op) {
  return std::make_unique<RecursiveDoublingAllReduce>(rank, size, op);
}

}  // namespace troupe::net::collectives
