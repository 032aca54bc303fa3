#include "devices/random.h"

#include <atomic>
#include <cmath>
#include <numbers>

#include "devices/error.h"

namespace troupe {

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

std::atomic<uint64_t> global_seed{0};
std::atomic<uint64_t> seed_epoch{1};  // bumped by manual_seed; threads reseed when theirs is older
std::atomic<uint64_t> thread_count{0};

struct ThreadState {
  Generator generator;
  uint64_t epoch = 0;
  uint64_t ordinal = thread_count.fetch_add(1, std::memory_order_relaxed);
};

ThreadState& state() {
  thread_local ThreadState s;
  return s;
}

}  // namespace

Generator::Generator(uint64_t seed) {
  for (uint64_t& word : s_) word = splitmix64(seed);
}

Generator::State Generator::state() const { return {s_[0], s_[1], s_[2], s_[3]}; }

void Generator::set_state(const State& state) {
  if (state == State{}) throw ValueError("Generator::set_state: the all-zero state is not a xoshiro256** state");
  for (size_t i = 0; i < state.size(); ++i) s_[i] = state[i];
}

uint64_t Generator::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

void manual_seed(uint64_t seed) {
  global_seed.store(seed, std::memory_order_relaxed);
  ThreadState& s = state();
  s.epoch = seed_epoch.fetch_add(1, std::memory_order_acq_rel) + 1;
  s.generator = Generator(seed);
}

Generator& thread_generator() {
  ThreadState& s = state();
  const uint64_t epoch = seed_epoch.load(std::memory_order_acquire);
  if (s.epoch != epoch) {
    s.epoch = epoch;
    uint64_t mix = global_seed.load(std::memory_order_relaxed) ^ (0xD1B54A32D192ED03ull * (s.ordinal + 1));
    s.generator = Generator(splitmix64(mix));
  }
  return s.generator;
}

double Generator::normal() {
  const double radius = std::sqrt(-2.0 * std::log(1.0 - uniform()));  // 1 - u is in (0, 1]: no log(0)
  return radius * std::cos(2.0 * std::numbers::pi * uniform());
}

namespace {

void check_floating(const char* op, DType dtype) {
  if (!is_floating(dtype)) throw DTypeError(std::string(op) + ": expects a floating dtype, got " + name(dtype));
}

// A new tensor of a floating dtype, draw() per element, in order.
template <class Draw>
Tensor fill_random(const Shape& shape, DType dtype, Draw draw) {
  Tensor out = Tensor::empty(shape, dtype);
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> ||
                  std::is_same_v<T, BFloat16>) {
      T* p = out.mutable_data<T>();
      for (int64_t i = 0; i < out.numel(); ++i) p[i] = convert<T>(draw());
    }
  });
  return out;
}

}  // namespace

Tensor rand_uniform(const Shape& shape, double low, double high, DType dtype, Generator& g) {
  check_floating("rand_uniform", dtype);
  if (!(low <= high))
    throw ValueError("rand_uniform: low " + std::to_string(low) + " must not exceed high " + std::to_string(high));
  return fill_random(shape, dtype, [&] { return low + (high - low) * g.uniform(); });
}

Tensor rand_normal(const Shape& shape, double mean, double stddev, DType dtype, Generator& g) {
  check_floating("rand_normal", dtype);
  if (!(stddev >= 0)) throw ValueError("rand_normal: stddev must not be negative, got " + std::to_string(stddev));
  return fill_random(shape, dtype, [&] { return mean + stddev * g.normal(); });
}

}  // namespace troupe
