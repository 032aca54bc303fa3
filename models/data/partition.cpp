#include "models/data/partition.h"

#include <numeric>
#include <string>

#include "devices/error.h"
#include "devices/random.h"

namespace troupe::models {

std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  Generator gen(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(gen.next() % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

DataPartitioner::DataPartitioner(int64_t n, const std::vector<double>& fractions, uint64_t seed) {
  if (n < 0) throw ValueError("DataPartitioner: negative dataset size " + std::to_string(n));
  double total = 0;
  for (double f : fractions) {
    if (!(f > 0)) throw ValueError("DataPartitioner: fractions must be positive, got " + std::to_string(f));
    total += f;
  }
  if (fractions.empty() || total > 1 + 1e-9)
    throw ValueError("DataPartitioner: fractions must be non-empty and sum to at most 1, sum " + std::to_string(total));
  const std::vector<int64_t> order = seeded_permutation(n, seed);
  int64_t start = 0;
  for (double f : fractions) {
    const auto len = std::min(static_cast<int64_t>(f * static_cast<double>(n)), n - start);
    parts_.emplace_back(order.begin() + start, order.begin() + start + len);
    start += len;
  }
}

const std::vector<int64_t>& DataPartitioner::partition(int index) const {
  if (index < 0 || index >= parts())
    throw IndexError("DataPartitioner: partition " + std::to_string(index) + " of " + std::to_string(parts()));
  return parts_[static_cast<size_t>(index)];
}

}  // namespace troupe::models
