// Ring reduce-scatter: the partial reduction for rank d starts at rank d+1 and travels once
// around the ring, each rank adding its inputs[d], ending fully reduced at d after n-1 steps.
// Every rank sends and receives (n-1)/n of its inputs, the bandwidth optimum; received buffers
// are reduced in place and forwarded without copies.
#include "net/collectives/algorithms.h"
#include "net/collectives/reduce_kernels.h"

namespace troupe::net::collectives {

Tensor ring_reduce_scatter(CollectiveCall& call, const std::vector<Tensor>& inputs, ReduceOp op) {
  const int n = call.size(), r = call.rank();
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  const ReduceOp combine = op == ReduceOp::avg ? ReduceOp::sum : op;
  auto input = [&](int d) -> const Tensor& { return inputs[static_cast<size_t>((d + n) % n)]; };

  call.send(right, input(r - 1));
  Tensor acc;
  for (int step = 1; step < n; ++step) {
    const Tensor& own = input(r - step - 1);  // the segment arriving now is destined to r-step-1
    acc = call.recv(left);
    void* out = acc.mutable_raw_data();  // uniquely owned: no copy
    reduce_buffers(out, own.raw_data(), out, static_cast<size_t>(own.numel()), own.dtype(), combine);
    if (step < n - 1) call.send(right, acc);
  }
  if (op == ReduceOp::avg) divide_buffer(acc.mutable_raw_data(), static_cast<size_t>(acc.numel()), acc.dtype(), n);
  return acc.view(input(r).shape());
}

}  // namespace troupe::net::collectives
