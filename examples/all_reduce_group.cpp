// The collective example of PyTorch's tutorial "Writing Distributed Applications with PyTorch": ranks 0 and 1 form a group and all-reduce (sum) a
// tensor of ones, so each ends with 2.
//
//   build/bin/troupe launch --nproc 2 -- build/bin/all_reduce_group
//   [rank 0] Rank 0 has data tensor(2.)
//   [rank 1] Rank 1 has data tensor(2.)
#include <cstdio>

#include "net/collectives.h"
#include "examples/run_example.h"

int main() {
  return troupe::run_example("all_reduce_group", [&] {
    using namespace troupe;
    auto world = net::init_process_group();
    auto group = world->new_group({0, 1});  // every rank calls it; ranks outside get nullptr
    Tensor tensor = Tensor::ones({1});
    if (group) net::all_reduce(*group, tensor, net::ReduceOp::sum);
    std::printf("Rank %d has data tensor(%g.)\n", world->rank(), tensor.to_vector<float>()[0]);
    return 0;
  });
}
