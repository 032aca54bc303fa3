#pragma once
// Random numbers for dropout and initialisation: one generator per thread (no locks on the hot
// path), all derived from the seed that manual_seed() sets. The thread that calls manual_seed(s)
// gets the sequence of seed s exactly; any other thread, on its next draw, reseeds from s and its
// own ordinal, so runs repeat when the same threads do the same work.
//
//   manual_seed(1234);
//   Tensor w = rand_uniform({50, 320}, -0.05, 0.05);   // same values every run
//   double u = thread_generator().uniform();           // in [0, 1)
#include <cstdint>

#include "devices/tensor.h"

namespace troupe {

// xoshiro256** (seeded through splitmix64): fast, 2^256 - 1 period.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0);
  uint64_t next();
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }        // [0, 1)

 private:
  uint64_t s_[4];
};

void manual_seed(uint64_t seed);
Generator& thread_generator();

// Uniform in [low, high) from the calling thread's generator; floating dtypes.
Tensor rand_uniform(const Shape& shape, double low, double high, DType dtype = DType::f32);

}  // namespace troupe
