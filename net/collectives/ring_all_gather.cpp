// Ring all-gather: in step t every rank passes the part it received in step t-1 (its own, first)
// to its right neighbour, so after n-1 steps every rank holds every part. Each part crosses each
// link once, and received parts are forwarded as they are (zero-copy).
#include "net/collectives/algorithms.h"

namespace troupe::net::collectives {

std::vector<Tensor> ring_all_gather(CollectiveCall& call, const Tensor& mine) {
  const int n = call.size(), r = call.rank();
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  std::vector<Tensor> parts(static_cast<size_t>(n));
  parts[static_cast<size_t>(r)] = mine;
  call.send(right, mine);
  for (int step = 1; step < n; ++step) {
    Tensor got = call.recv(left);  // rank (r - step)'s part
    if (step < n - 1) call.send(right, got);
    parts[static_cast<size_t>((r - step + n) % n)] = std::move(got);
  }
  return parts;
}

}  // namespace troupe::net::collectives
