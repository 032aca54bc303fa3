#include "models/data/loader.h"

#include <string>

#include "actors/fork.h"
#include "devices/error.h"
#include "devices/ops.h"
#include "models/data/partition.h"

namespace troupe::models {

BatchLoader::BatchLoader(Dataset data, std::vector<int64_t> indices, int64_t batch_size, uint64_t seed)
    : data_(std::move(data)), indices_(std::move(indices)), batch_size_(batch_size), seed_(seed) {
  if (batch_size <= 0) throw ValueError("BatchLoader: batch size must be positive, got " + std::to_string(batch_size));
  for (int64_t i : indices_)
    if (i < 0 || i >= data_.size())
      throw IndexError("BatchLoader: index " + std::to_string(i) + " outside a dataset of " +
                       std::to_string(data_.size()));
}

int64_t BatchLoader::batches_per_epoch() const {
  return (static_cast<int64_t>(indices_.size()) + batch_size_ - 1) / batch_size_;
}

void BatchLoader::start_epoch(int epoch, int64_t first_batch) {
  if (first_batch < 0 || first_batch > batches_per_epoch())
    throw IndexError("BatchLoader::start_epoch: batch " + std::to_string(first_batch) + " outside an epoch of " +
                     std::to_string(batches_per_epoch()) + " batches");
  if (pending_) pending_->get();  // never leave a task running over the order it reads
  const auto perm = seeded_permutation(static_cast<int64_t>(indices_.size()), seed_ + static_cast<uint64_t>(epoch));
  order_.resize(indices_.size());
  for (size_t i = 0; i < perm.size(); ++i) order_[i] = indices_[static_cast<size_t>(perm[i])];
  cursor_ = first_batch * batch_size_;
  position_ = first_batch;
  pending_.reset();
  prefetch();
}

Batch BatchLoader::gather(int64_t first) const {
  const int64_t count = std::min<int64_t>(batch_size_, static_cast<int64_t>(order_.size()) - first);
  std::vector<int64_t> rows(order_.begin() + first, order_.begin() + first + count);
  Tensor index = Tensor::from_vector(rows, {count});
  return {index_select(data_.images, 0, index), index_select(data_.labels, 0, index)};
}

void BatchLoader::prefetch() {
  if (cursor_ >= static_cast<int64_t>(order_.size())) return;
  pending_ = fork([this](int64_t first) { return gather(first); }, cursor_);
  cursor_ += batch_size_;
}

std::optional<Batch> BatchLoader::next() {
  if (!pending_) return std::nullopt;
  Batch batch = pending_->get();
  pending_.reset();
  ++position_;
  prefetch();
  return batch;
}

}  // namespace troupe::models
