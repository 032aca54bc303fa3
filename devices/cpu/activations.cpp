// Vectorisable exp, tanh, sigmoid and gelu for f32. Each is a branch-free scalar "lane" function
// applied over fixed-size blocks; `ivdep` lets the compiler vectorise a block without proving that
// x and y do not alias (y[i] depends on x[i] only, so in-place calls are right too). A local
// buffer did the same, but GCC 12 copied it out through general registers: exp ran 1.6x slower.
#include "devices/cpu/activations.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace troupe {

namespace {

// e^x = 2^k e^r with k = round(x / ln2) and r = x - k ln2 in [-ln2/2, ln2/2]; e^r by its Taylor
// series to r^7 (truncation below 2e-8 relative there). 2^k is applied as two halves so that
// results down in the subnormal range come out right and 2^128 overflows to inf. Arguments below
// `lowest` count as `lowest`.
inline float exp_lane(float x, float lowest = -104.0f) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693147182464599609375f;  // float(ln 2)
  constexpr float kLn2Lo = -1.904654299957768e-09f;   // ln 2 - kLn2Hi
  constexpr float kRound = 12582912.0f;               // 1.5 * 2^23: adding it rounds to an integer
  const float c = std::min(std::max(x, lowest), 89.0f);  // beyond [-104, 89] e^x is 0 or inf in f32
  const float shifted = std::fma(c, kLog2e, kRound);
  const float k = shifted - kRound;
  const int32_t ki = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kRound);
  float r = std::fma(k, -kLn2Hi, c);
  r = std::fma(k, -kLn2Lo, r);
  float p = 1.0f / 5040;
  p = std::fma(p, r, 1.0f / 720);
  p = std::fma(p, r, 1.0f / 120);
  p = std::fma(p, r, 1.0f / 24);
  p = std::fma(p, r, 1.0f / 6);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  const int32_t k1 = ki >> 1, k2 = ki - k1;  // each in [-75, 64]: a normal power of two
  const float scale1 = std::bit_cast<float>((k1 + 127) << 23);
  const float scale2 = std::bit_cast<float>((k2 + 127) << 23);
  // NaN in, NaN out without a test of its own: the clamp keeps it (max and min return their
  // first operand when it is NaN) and p carries it. A select on x != x is control flow that GCC
  // does not vectorise for AVX2, and it left every activation scalar there.
  return p * scale1 * scale2;
}

// cond ? a : b on the bits. GCC 12 kept these ternaries as branches for AVX2 ("control flow in
// loop"), which left tanh and gelu scalar there.
inline float select(bool cond, float a, float b) {
  const int32_t mask = -static_cast<int32_t>(cond);
  return std::bit_cast<float>((std::bit_cast<int32_t>(a) & mask) | (std::bit_cast<int32_t>(b) & ~mask));
}

// Arithmetic on subnormal floats is many times slower than on normal ones. Where a tiny e^x only
// ever gets added to 1 (tanh, sigmoid), its argument stops at -87: e^-87 is still a normal float.
constexpr float kNoSubnormal = -87.0f;

// Below |x| = 0.625, tanh(x) = x + x^3 p(x^2) with p fitted (weighted least squares on
// Chebyshev nodes, relative error 8e-8 in f32); above, (1 - e) / (1 + e) with e = exp(-2|x|)
// loses nothing to cancellation.
inline float tanh_lane(float x) {
  const float a = std::fabs(x);
  const float e = exp_lane(-2.0f * a, kNoSubnormal);
  const float large = std::copysign((1.0f - e) / (1.0f + e), x);
  const float u = x * x;
  float p = -5.691985599e-03f;
  p = std::fma(p, u, 2.062629163e-02f);
  p = std::fma(p, u, -5.373531953e-02f);
  p = std::fma(p, u, 1.333138198e-01f);
  p = std::fma(p, u, -3.333328068e-01f);
  const float small = std::fma(x * u, p, x);
  return select(a < 0.625f, small, large);
}

inline float sigmoid_lane(float x) { return 1.0f / (1.0f + exp_lane(-x, kNoSubnormal)); }

// gelu(x) = x Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2. For z >= 0,
// erfc(z) = t h(t) exp(-z^2), t = 1 / (1 + z/2), h a degree-8 polynomial fitted to
// erfcx(z) / t on z in [0, 10] (relative error 3e-7 in f32). Working with erfc of |x| keeps
// the relative accuracy where Phi is tiny (large negative x), unlike 1 + erf(x). Beyond z = 9
// (x < -12.7, where gelu is below 3e-36) the result is 0, keeping every step out of subnormals.
inline float gelu_lane(float x) {
  constexpr float kInvSqrt2 = 0.707106781186547524f;
  const float z = std::fabs(x) * kInvSqrt2;
  const float t = 1.0f / std::fma(0.5f, z, 1.0f);
  float h = -6.010870636e-02f;
  h = std::fma(h, t, 2.894461155e-01f);
  h = std::fma(h, t, -4.968295693e-01f);
  h = std::fma(h, t, 2.885151505e-01f);
  h = std::fma(h, t, -3.339901939e-02f);
  h = std::fma(h, t, 2.053604275e-01f);
  h = std::fma(h, t, 2.424793839e-01f);
  h = std::fma(h, t, 2.824538350e-01f);
  h = std::fma(h, t, 2.820823491e-01f);
  // exp(-z^2) with z^2 = x^2 / 2 split exactly into hi + lo: rounding z or z^2 would cost
  // ~1e-5 relative accuracy out where exp(-z^2) is tiny.
  const float hi = 0.5f * (x * x);
  const float lo = 0.5f * std::fma(x, x, -(x * x));
  const float tail = t * h * exp_lane(-hi, -81.0f) * (1.0f - lo);
  const float erfc_z = select(z > 9.0f, 0.0f, tail);
  const float phi = select(x >= 0.0f, 1.0f - 0.5f * erfc_z, 0.5f * erfc_z);
  return x * phi;
}

// 0.5 x (1 + tanh(u)) is x sigmoid(2u): no cancellation for large negative x.
inline float gelu_tanh_lane(float x) {
  constexpr float kSqrt2OverPi = 0.797884560802865356f;
  const float u = kSqrt2OverPi * std::fma(0.044715f * x, x * x, x);
  return x * sigmoid_lane(2.0f * u);
}

template <class Lane>
void map_f32(const float* x, float* y, int64_t n, Lane lane) {
  constexpr int64_t kBlock = 64;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
#pragma GCC ivdep
    for (int64_t j = 0; j < kBlock; ++j) y[i + j] = lane(x[i + j]);
  }
  if (i < n) {
    alignas(64) float in[kBlock] = {}, out[kBlock];
    const size_t rest = static_cast<size_t>(n - i) * sizeof(float);
    std::memcpy(in, x + i, rest);
    for (int64_t j = 0; j < kBlock; ++j) out[j] = lane(in[j]);
    std::memcpy(y + i, out, rest);
  }
}

}  // namespace

void exp_f32(const float* x, float* y, int64_t n) { map_f32(x, y, n, [](float v) { return exp_lane(v); }); }
void exp_shifted_f32(const float* x, float* y, int64_t n, float shift, float scale) {
  map_f32(x, y, n, [=](float v) { return exp_lane((v - shift) * scale); });
}
void tanh_f32(const float* x, float* y, int64_t n) { map_f32(x, y, n, [](float v) { return tanh_lane(v); }); }
void sigmoid_f32(const float* x, float* y, int64_t n) { map_f32(x, y, n, [](float v) { return sigmoid_lane(v); }); }
void gelu_f32(const float* x, float* y, int64_t n) { map_f32(x, y, n, [](float v) { return gelu_lane(v); }); }
void gelu_tanh_f32(const float* x, float* y, int64_t n) { map_f32(x, y, n, [](float v) { return gelu_tanh_lane(v); }); }

}  // namespace troupe
