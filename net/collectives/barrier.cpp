// Dissemination barrier (Hensgen, Finkel and Manber): in round k every rank sends a header-only
// note to rank + 2^k and waits for one from rank - 2^k. After ceil(log2 n) rounds every rank has
// heard, directly or through others, from every rank, whatever n is.
#include "net/collectives/algorithms.h"

namespace troupe::net::collectives {

void dissemination_barrier(CollectiveCall& call) {
  const int n = call.size(), r = call.rank();
  for (int distance = 1; distance < n; distance <<= 1) {
    call.send_note((r + distance) % n);
    call.recv((r - distance + n) % n);
  }
}

}  // namespace troupe::net::collectives
