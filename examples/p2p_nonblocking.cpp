// Non-blocking point-to-point, the second example of PyTorch's tutorial "Writing Distributed Applications with PyTorch": isend/irecv return Work
// handles at once; wait() completes them (and, for irecv, fills the tensor).
//
//   build/bin/troupe launch --nproc 2 -- build/bin/p2p_nonblocking
//   [rank 0] Rank 0 started sending
//   [rank 1] Rank 1 started receiving
//   [rank 0] Rank 0 has data tensor(1.)
//   [rank 1] Rank 1 has data tensor(1.)
#include <cstdio>

#include "devices/ops.h"
#include "net/process_group.h"
#include "examples/run_example.h"

int main() {
  return troupe::run_example("p2p_nonblocking", [&] {
    using namespace troupe;
    auto world = net::init_process_group();
    Tensor tensor = Tensor::zeros({1});
    net::Work request;
    if (world->rank() == 0) {
      tensor = add(tensor, 1.0);
      request = world->isend(tensor, /*dst=*/1);
      std::printf("Rank 0 started sending\n");
    } else if (world->rank() == 1) {
      request = world->irecv(tensor, /*src=*/0);
      std::printf("Rank 1 started receiving\n");
    }
    if (request.valid()) request.wait();
    std::printf("Rank %d has data tensor(%g.)\n", world->rank(), tensor.to_vector<float>()[0]);
    return 0;
  });
}
