#pragma once
// Batches of a dataset over a list of indices, reshuffled each epoch (seeded), the next batch
// always being gathered by a forked task while the caller trains on the current one.
//
//   BatchLoader loader(train, parts.partition(rank), /*batch=*/64, /*seed=*/1234);
//   for (int epoch = 0; epoch < 10; ++epoch) {
//     loader.start_epoch(epoch);
//     while (auto batch = loader.next()) train_step(batch->images, batch->labels);
//   }
//   loader.start_epoch(epoch, position);   // resuming: the epoch's order, from batch `position` on
#include <optional>
#include <vector>

#include "actors/future.h"
#include "models/data/fashion_mnist.h"

namespace troupe::models {

struct Batch {
  Tensor images;  // [b, 1, 28, 28]
  Tensor labels;  // [b]
};

class BatchLoader {
 public:
  BatchLoader(Dataset data, std::vector<int64_t> indices, int64_t batch_size, uint64_t seed);

  // Shuffles with seed + epoch and prefetches batch first_batch (0..batches_per_epoch()).
  void start_epoch(int epoch, int64_t first_batch = 0);
  std::optional<Batch> next();   // nullopt at the end of the epoch
  int64_t batches_per_epoch() const;
  int64_t position() const { return position_; }  // batches of this epoch handed out, those skipped included

 private:
  Batch gather(int64_t first) const;
  void prefetch();

  Dataset data_;
  std::vector<int64_t> indices_, order_;
  int64_t batch_size_;
  uint64_t seed_;
  int64_t cursor_ = 0;
  int64_t position_ = 0;
  std::optional<Future<Batch>> pending_;
};

}  // namespace troupe::models
