// Blocking point-to-point, the first example of PyTorch's tutorial "Writing Distributed Applications with PyTorch": rank 0 adds 1 to a zero tensor and
// sends it to rank 1, which receives it.
//
//   build/bin/troupe launch --nproc 2 -- build/bin/p2p_blocking
//   [rank 0] Rank 0 has data tensor(1.)
//   [rank 1] Rank 1 has data tensor(1.)
#include <cstdio>

#include "devices/ops.h"
#include "net/process_group.h"
#include "examples/run_example.h"

int main() {
  return troupe::run_example("p2p_blocking", [&] {
    using namespace troupe;
    auto world = net::init_process_group();  // env://: troupe launch set RANK, WORLD_SIZE, MASTER_*
    Tensor tensor = Tensor::zeros({1});
    if (world->rank() == 0) {
      tensor = add(tensor, 1.0);
      world->send(tensor, /*dst=*/1);
    } else if (world->rank() == 1) {
      world->recv(tensor, /*src=*/0);
    }
    std::printf("Rank %d has data tensor(%g.)\n", world->rank(), tensor.to_vector<float>()[0]);
    return 0;
  });
}
