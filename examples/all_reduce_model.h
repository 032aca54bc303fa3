#pragma once
// The alpha-beta model of all_reduce (Hockney; Thakur, Rabenseifner and Gropp 2005): a message of
// m bytes costs alpha + m * beta. With p ranks,
//   ring (reduce-scatter + all-gather):   2(p-1) alpha + 2(p-1)/p m beta
//   tree (recursive doubling):            log2(p) (alpha + m beta)
//   two levels, h hosts of l ranks:       within-host all_reduce twice (alpha_l, beta_l, ring)
//                                         + ring among the h leaders (alpha, beta)
// fit() reads alpha and beta off a tiny and a large all_reduce measured at one world size.
//
//   AlphaBeta net = fit(2, 80e-6, 64 << 20, 0.057);
//   double t = ring_seconds(net, 1024, 1 << 20);
#include <algorithm>
#include <cmath>

namespace troupe {

struct AlphaBeta {
  double alpha = 0;  // seconds per message
  double beta = 0;   // seconds per byte
};

inline double ring_seconds(const AlphaBeta& c, int p, double m) {
  return p < 2 ? 0 : 2.0 * (p - 1) * c.alpha + 2.0 * (p - 1) / p * m * c.beta;
}
inline double tree_seconds(const AlphaBeta& c, int p, double m) {
  return p < 2 ? 0 : std::ceil(std::log2(p)) * (c.alpha + m * c.beta);
}
inline double two_level_seconds(const AlphaBeta& network, const AlphaBeta& host, int hosts, int per_host, double m) {
  return 2 * ring_seconds(host, per_host, m) + ring_seconds(network, hosts, m);
}
// The size above which the ring beats the tree at p ranks; infinity when it never does (2 ranks:
// the ring sends as many bytes in twice the messages).
inline double ring_tree_crossover_bytes(const AlphaBeta& c, int p) {
  const double lg = std::ceil(std::log2(p)), latency = (2.0 * (p - 1) - lg) * c.alpha,
               per_byte = (lg - 2.0 * (p - 1) / p) * c.beta;
  return per_byte <= 0 ? HUGE_VAL : std::max(0.0, latency / per_byte);
}

// alpha and beta from two measurements at p ranks, each read as the algorithm that ran it: a tiny
// all_reduce (recursive doubling: log2(p) messages, the bytes negligible) and a large one (the
// ring, latency by then negligible beside 2(p-1)/p m beta; on 2 ranks the pair exchange, which
// sends as many bytes).
inline AlphaBeta fit(int p, double tiny_seconds, double large_bytes, double large_seconds) {
  AlphaBeta c;
  c.alpha = tiny_seconds / std::ceil(std::log2(p));
  c.beta = std::max(0.0, large_seconds - 2.0 * (p - 1) * c.alpha) / (2.0 * (p - 1) / p * large_bytes);
  return c;
}

}  // namespace troupe
