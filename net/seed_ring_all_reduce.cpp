#include "net/seed_ring_all_reduce.h"

#include "devices/ops.h"

namespace troupe::net {

void seed_ring_all_reduce(ProcessGroup& group, Tensor& tensor) {
  if (!tensor.defined()) throw ValueError("seed_ring_all_reduce: the tensor is undefined");
  const int rank = group.rank(), size = group.size();
  if (size == 1) return;
  const int left = (rank - 1 + size) % size, right = (rank + 1) % size;

  // One chunk per rank (the last ones may be one element shorter).
  const Tensor flat = tensor.reshape({tensor.numel()});
  const int64_t n = flat.numel();
  std::vector<Tensor> chunks;
  for (int c = 0; c < size; ++c) chunks.push_back(flat.slice(0, n * c / size, n * (c + 1) / size));
  auto chunk = [&](int c) -> Tensor& { return chunks[static_cast<size_t>((c % size + size) % size)]; };

  // Reduce-scatter: send the chunk summed so far, add the one arriving.
  for (int step = 0; step < size - 1; ++step) {
    Work send = group.isend(chunk(rank - step), right, kSeedRingTag);
    Tensor incoming = Tensor::empty(chunk(rank - step - 1).shape(), tensor.dtype());
    group.recv(incoming, left, kSeedRingTag);
    chunk(rank - step - 1) = add(chunk(rank - step - 1), incoming);
    send.wait();
  }
  // All-gather: rank r owns chunk r+1; pass the finished chunks around.
  for (int step = 0; step < size - 1; ++step) {
    Work send = group.isend(chunk(rank + 1 - step), right, kSeedRingTag);
    group.recv(chunk(rank - step), left, kSeedRingTag);
    send.wait();
  }
  tensor = cat(chunks).reshape(tensor.shape());
}

}  // namespace troupe::net
