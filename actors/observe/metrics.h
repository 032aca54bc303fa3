#pragma once
// Always-on metrics in Prometheus' text format: counters, gauges and histograms registered by
// name and labels, updated lock-free (relaxed atomics; a counter is split over cache-line slots,
// one owned by each counting thread, which adds without a locked instruction), and served over
// HTTP when TROUPE_METRICS_PORT is set (metrics_server.h).
//
//   metrics::Counter& sent = metrics::counter("troupe_transport_sent_bytes_total", "Bytes sent",
//                                             {{"peer", "1"}, {"path", "direct"}});
//   sent.add(4096);                             // one relaxed fetch_add; registration is the slow part
//   std::string text = metrics::exposition();   // what GET /metrics returns
//
// Registering the same name and labels again returns the same series (two module actors of one
// name count together); series live until the process exits. TROUPE_METRICS=0 turns every update
// into one relaxed load (the same-run comparison of fork_overhead and remote_bench).
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace troupe::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

namespace detail {
extern std::atomic<bool> enabled;
// This thread's own slot of every counter while it lives (below Counter::kOwned), or the shared
// one (kOwned) while more threads than that count at once.
unsigned thread_slot();
}  // namespace detail

// Whether updates count (TROUPE_METRICS unset or not "0"); set_enabled is for benchmarks and tests.
inline bool enabled() { return detail::enabled.load(std::memory_order_relaxed); }
void set_enabled(bool on);

class Counter {
 public:
  void add(uint64_t n = 1) {
    if (!enabled()) return;
    const unsigned slot = detail::thread_slot();
    std::atomic<uint64_t>& v = slots_[slot].value;
    if (slot < kOwned)
      v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);  // only this thread writes it
    else
      v.fetch_add(n, std::memory_order_relaxed);
  }
  uint64_t value() const;

  static constexpr unsigned kOwned = 15;

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> value{0};
  };
  std::array<Slot, kOwned + 1> slots_;
};

class Gauge {
 public:
  void add(int64_t n) {
    if (enabled()) value_.fetch_add(n, std::memory_order_relaxed);
  }
  void set(int64_t v) { value_.store(v, std::memory_order_relaxed); }
  int64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

// Fixed buckets (upper bounds, ascending); +Inf is implicit.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Per bucket (not cumulative), the last one being +Inf; the sum and count of all observations.
  std::vector<uint64_t> buckets() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  uint64_t count() const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<double> sum_{0};
};

// 1 us .. 10 s, three per decade: latencies of actor calls and collectives.
const std::vector<double>& latency_buckets();

Counter& counter(const std::string& name, const std::string& help, const Labels& labels = {});
Gauge& gauge(const std::string& name, const std::string& help, const Labels& labels = {});
Histogram& histogram(const std::string& name, const std::string& help, const Labels& labels = {},
                     const std::vector<double>& bounds = latency_buckets());

// An actor's series, labelled actor="<name>" (module actors, hosted remote actors): calls run,
// calls that threw, calls queued and not yet running, and the time calls ran.
struct ActorMetrics {
  explicit ActorMetrics(const std::string& actor);
  Counter& calls;
  Counter& errors;
  Gauge& mailbox;
  Histogram& seconds;
};

// Every series in Prometheus' text exposition format 0.0.4, families sorted by name.
std::string exposition();

// Seconds since `start` on the steady clock, for histograms.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace troupe::metrics
