// Direct exchanges for the collectives whose data is different for every pair: scatter (root to
// each rank), gather (each rank to root) and all-to-all (every pair, both ways). All sends are
// queued at once (they never block), then the receives drain in rank order.
//
// Scatter and gather use the agreement of call.h (announce to rank 0, wait for its
// confirmation), so a mismatched call fails on every rank.
#include "net/collectives/algorithms.h"

namespace troupe::net::collectives {

Tensor direct_scatter(CollectiveCall& call, const std::vector<Tensor>& inputs, int root) {
  const int n = call.size(), r = call.rank();
  call.announce();
  if (r == root)
    for (int d = 0; d < n; ++d)
      if (d != r) call.send(d, inputs[static_cast<size_t>(d)]);
  call.check_announcements();
  Tensor part = r == root ? inputs[static_cast<size_t>(r)] : call.recv(root);
  call.confirm();
  return part;
}

std::vector<Tensor> direct_gather(CollectiveCall& call, const Tensor& mine, int root) {
  const int n = call.size(), r = call.rank();
  call.announce();
  call.check_announcements();
  std::vector<Tensor> parts;
  if (r != root) {
    call.send(root, mine);
  } else {
    parts.resize(static_cast<size_t>(n));
    parts[static_cast<size_t>(r)] = mine;
    for (int s = 0; s < n; ++s)
      if (s != r) parts[static_cast<size_t>(s)] = call.recv(s);
  }
  call.confirm();
  return parts;
}

std::vector<Tensor> direct_all_to_all(CollectiveCall& call, const std::vector<Tensor>& inputs) {
  const int n = call.size(), r = call.rank();
  // Start with the right neighbour so that no rank is everyone's first destination.
  for (int i = 1; i < n; ++i) {
    const int d = (r + i) % n;
    call.send(d, inputs[static_cast<size_t>(d)]);
  }
  std::vector<Tensor> outputs(static_cast<size_t>(n));
  outputs[static_cast<size_t>(r)] = inputs[static_cast<size_t>(r)];
  for (int i = 1; i < n; ++i) {
    const int s = (r - i + n) % n;
    outputs[static_cast<size_t>(s)] = call.recv(s);
  }
  return outputs;
}

}  // namespace troupe::net::collectives
