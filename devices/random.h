#pragma once
// Random numbers for dropout and initialisation: one generator per thread (no locks on the hot
// path), all derived from the seed that manual_seed() sets. The thread that calls manual_seed(s)
// gets the sequence of seed s exactly; any other thread, on its next draw, reseeds from s and its
// own ordinal, so runs repeat when the same threads do the same work. A model whose constructor
// takes a seed draws from a Generator of its own instead, and leaves the thread's stream alone.
//
//   manual_seed(1234);
//   Tensor w = rand_uniform({50, 320}, -0.05, 0.05);   // same values every run
//   double u = thread_generator().uniform();           // in [0, 1)
//   Generator local(7);
//   Tensor e = rand_normal({10, 4}, 0.0, 0.02, DType::f32, local);   // the thread's stream untouched
//   Generator::State saved = thread_generator().state();            // a checkpoint's RNG state
//   thread_generator().set_state(saved);                             // the same draws follow
#include <array>
#include <cstdint>

#include "devices/tensor.h"

namespace troupe {

// xoshiro256** (seeded through splitmix64): fast, 2^256 - 1 period.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0);
  uint64_t next();
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }        // [0, 1)
  double normal();  // standard normal (Box-Muller, two draws per value)

  using State = std::array<uint64_t, 4>;
  State state() const;
  void set_state(const State& state);  // ValueError for all zeros, the one state xoshiro never leaves

 private:
  uint64_t s_[4];
};

void manual_seed(uint64_t seed);
Generator& thread_generator();

// Uniform in [low, high), normal(mean, stddev): floating dtypes, drawn from generator (by default
// the calling thread's).
Tensor rand_uniform(const Shape& shape, double low, double high, DType dtype = DType::f32,
                    Generator& generator = thread_generator());
Tensor rand_normal(const Shape& shape, double mean, double stddev, DType dtype = DType::f32,
                   Generator& generator = thread_generator());

}  // namespace troupe
