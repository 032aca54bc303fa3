// Binomial trees for the rooted collectives. Ranks are renumbered relative to the root
// (v = (rank - root) mod n); v's parent is v with its lowest set bit cleared, its children are
// v + 2^k for every 2^k below that bit. A broadcast flows down the tree in ceil(log2 n) rounds
// (root sends first to the farthest subtree, which then works in parallel); a reduce flows up it,
// each rank combining its children's partial results with its own.
//
// Agreement (call.h): every rank announces its call to rank 0, and returns only after rank 0
// confirmed, so a mismatched call fails on every rank instead of succeeding on some.
#include "net/collectives/algorithms.h"
#include "net/collectives/reduce_kernels.h"

namespace troupe::net::collectives {

namespace {

int lowest_bit_or(int v, int n) {
  int mask = 1;
  while (mask < n && !(v & mask)) mask <<= 1;
  return mask;  // v's lowest set bit, or the first power of two >= n for the root
}

}  // namespace

Tensor binomial_broadcast(CollectiveCall& call, const Tensor& data, int root) {
  const int n = call.size(), r = call.rank();
  const int v = (r - root + n) % n;
  auto actual = [&](int relative) { return (relative + root) % n; };
  const int bit = lowest_bit_or(v, n);
  call.announce();
  Tensor value = data;
  if (v == 0)
    for (int mask = bit >> 1; mask > 0; mask >>= 1)
      if (mask < n) call.send(actual(mask), value);
  call.check_announcements();
  if (v != 0) {
    value = call.recv(actual(v - bit));
    for (int mask = bit >> 1; mask > 0; mask >>= 1)
      if (v + mask < n) call.send(actual(v + mask), value);
  }
  call.confirm();
  return value;
}

Tensor binomial_reduce(CollectiveCall& call, const Tensor& data, int root, ReduceOp op) {
  const int n = call.size(), r = call.rank();
  const int v = (r - root + n) % n;
  auto actual = [&](int relative) { return (relative + root) % n; };
  const ReduceOp combine = op == ReduceOp::avg ? ReduceOp::sum : op;
  const size_t count = static_cast<size_t>(data.numel());
  call.announce();
  call.check_announcements();
  Tensor acc = data;
  const int bit = lowest_bit_or(v, n);
  for (int mask = 1; mask < bit; mask <<= 1) {
    if (v + mask >= n) continue;
    Tensor got = call.recv(actual(v + mask));
    void* out = got.mutable_raw_data();  // uniquely owned: reduce into it, no copy
    reduce_buffers(out, acc.raw_data(), out, count, data.dtype(), combine);
    acc = std::move(got);
  }
  if (v != 0) call.send(actual(v - bit), acc);
  else if (op == ReduceOp::avg) divide_buffer(acc.mutable_raw_data(), count, data.dtype(), n);
  call.confirm();
  return v == 0 ? acc : data;
}

}  // namespace troupe::net::collectives
