#pragma once
// The DataPartitioner of PyTorch's distributed tutorial: one seeded shuffle of [0, n), cut into consecutive parts by
// fractions, so rank r trains on partition(r) and the parts are disjoint.
//
//   DataPartitioner parts(60000, {0.5, 0.5}, /*seed=*/1234);
//   const std::vector<int64_t>& mine = parts.partition(rank);   // 30000 indices
#include <cstdint>
#include <vector>

namespace troupe::models {

class DataPartitioner {
 public:
  // fractions must be positive and sum to at most 1 (the rest is left out, like the distributed tutorial's).
  DataPartitioner(int64_t n, const std::vector<double>& fractions, uint64_t seed = 1234);
  const std::vector<int64_t>& partition(int index) const;
  int parts() const { return static_cast<int>(parts_.size()); }

 private:
  std::vector<std::vector<int64_t>> parts_;
};

// Every index of [0, n) once, in an order fixed by seed (Fisher-Yates on troupe's Generator).
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed);

}  // namespace troupe::models
