#include "actors/observe/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <variant>
#include <vector>

#include "devices/error.h"
#include "devices/host_allocator.h"

namespace troupe::metrics {

namespace detail {

std::atomic<bool> enabled{[] {
  const char* env = std::getenv("TROUPE_METRICS");
  return !(env && std::strcmp(env, "0") == 0);
}()};

namespace {

// The owned slots no live thread holds. A slot keeps its counts when its thread exits; the next
// thread to take it adds to them (the mutex orders the two threads' writes).
struct FreeSlots {
  std::mutex mutex;
  std::vector<unsigned> free;
  FreeSlots() {
    for (unsigned s = Counter::kOwned; s-- > 0;) free.push_back(s);
  }
};

FreeSlots& free_slots() {
  static FreeSlots* f = new FreeSlots;  // threads may exit after static destruction
  return *f;
}

// This thread's slot + 1 (0: none yet), in static TLS ("initial-exec": no __tls_get_addr call from
// this shared library), so that the hot path is one load.
__attribute__((tls_model("initial-exec"))) thread_local unsigned cached_slot = 0;

// Takes a slot for the thread and gives it back when the thread exits; counts made later in the
// thread's exit go to the shared slot.
struct SlotHolder {
  unsigned slot = Counter::kOwned;
  SlotHolder() {
    std::lock_guard lock(free_slots().mutex);
    if (!free_slots().free.empty()) {
      slot = free_slots().free.back();
      free_slots().free.pop_back();
    }
  }
  ~SlotHolder() {
    cached_slot = Counter::kOwned + 1;
    if (slot == Counter::kOwned) return;
    std::lock_guard lock(free_slots().mutex);
    free_slots().free.push_back(slot);
  }
};

}  // namespace

unsigned thread_slot() {
  if (cached_slot) return cached_slot - 1;
  thread_local const SlotHolder holder;
  cached_slot = holder.slot + 1;
  return holder.slot;
}

}  // namespace detail

void set_enabled(bool on) { detail::enabled.store(on, std::memory_order_relaxed); }

uint64_t Counter::value() const {
  uint64_t total = 0;
  for (const Slot& s : slots_) total += s.value.load(std::memory_order_relaxed);
  return total;
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  if (!std::is_sorted(bounds_.begin(), bounds_.end()))
    throw ValueError("metrics: histogram bucket bounds must ascend");
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double v) {
  if (!enabled()) return;
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::buckets() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = counts_[i].load(std::memory_order_relaxed);
  return out;
}

uint64_t Histogram::count() const {
  uint64_t total = 0;
  for (uint64_t c : buckets()) total += c;
  return total;
}

const std::vector<double>& latency_buckets() {
  static const std::vector<double> bounds = {1e-6,   2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3,
                                             2.5e-3, 5e-3,   1e-2, 2.5e-2, 5e-2, 0.1,  0.25, 0.5,    1,    2.5,
                                             5,      10};
  return bounds;
}

namespace {

using Series = std::variant<std::unique_ptr<Counter>, std::unique_ptr<Gauge>, std::unique_ptr<Histogram>,
                            std::function<double()>>;

struct Family {
  std::string help;
  const char* type;
  std::map<std::string, Series> series;  // by rendered labels: `{peer="1",path="direct"}`
};

std::string escape(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

void check_name(const std::string& name, const char* what) {
  const bool ok = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                  std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
  if (!ok) throw ValueError(std::string("metrics: invalid ") + what + " name '" + name + "' (letters, digits, _)");
}

std::string render(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (const auto& [k, v] : labels) {
    check_name(k, "label");
    if (out.size() > 1) out += ',';
    out += k + "=\"" + escape(v) + "\"";
  }
  return out + "}";
}

// Labels with one more appended (a histogram's le), rendered.
std::string with_label(const std::string& rendered, const std::string& key, const std::string& value) {
  const std::string pair = key + "=\"" + value + "\"";
  if (rendered.empty()) return "{" + pair + "}";
  return rendered.substr(0, rendered.size() - 1) + "," + pair + "}";
}

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buffer[32];  // the shortest text that reads back as v: le="2.5e-06", not 2.5000000000000002e-06
  const auto end = std::to_chars(buffer, buffer + sizeof buffer, v).ptr;
  return std::string(buffer, end);
}

double resident_bytes() {
  long pages_total = 0, pages_resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2) pages_resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(pages_resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

class Registry {
 public:
  Registry() {
    // What every process has: set here so that a scrape shows them before anything else counted.
    const char* restarts = std::getenv("TROUPE_RESTART_COUNT");
    const double restart_count = restarts ? std::strtod(restarts, nullptr) : 0;
    add("troupe_restarts_total", "Times troupe launch started this job's ranks again (TROUPE_RESTART_COUNT)", "counter",
        {}, [restart_count] { return restart_count; });
    add("troupe_process_resident_memory_bytes", "Resident memory of this process (/proc/self/statm)", "gauge", {},
        std::function<double()>(resident_bytes));
    add("troupe_host_allocator_cached_bytes", "Freed large host blocks the allocator keeps for reuse", "gauge", {},
        std::function<double()>([] { return static_cast<double>(host_cached_bytes()); }));
  }

  template <class T, class... Args>
  T& get(const std::string& name, const std::string& help, const char* type, const Labels& labels, Args&&... args) {
    std::lock_guard lock(mutex_);
    Family& f = family(name, help, type);
    auto [it, fresh] = f.series.try_emplace(render(labels));
    if (fresh) it->second = std::make_unique<T>(std::forward<Args>(args)...);
    return *std::get<std::unique_ptr<T>>(it->second);
  }

  Counter& counter_series(const std::string& name, const std::string& help, const Labels& labels) {
    return get<Counter>(name, help, "counter", labels);
  }

  void add(const std::string& name, const std::string& help, const char* type, const Labels& labels,
           std::function<double()> fn) {
    std::lock_guard lock(mutex_);
    family(name, help, type).series[render(labels)] = std::move(fn);
  }

  std::string exposition() {
    std::lock_guard lock(mutex_);
    std::string out;
    for (const auto& [name, f] : families_) {
      out += "# HELP " + name + " " + f.help + "\n# TYPE " + name + " " + f.type + "\n";
      for (const auto& [labels, s] : f.series) {
        if (auto* c = std::get_if<std::unique_ptr<Counter>>(&s)) {
          out += name + labels + " " + std::to_string((*c)->value()) + "\n";
        } else if (auto* g = std::get_if<std::unique_ptr<Gauge>>(&s)) {
          out += name + labels + " " + std::to_string((*g)->value()) + "\n";
        } else if (auto* fn = std::get_if<std::function<double()>>(&s)) {
          out += name + labels + " " + number((*fn)()) + "\n";
        } else {
          const Histogram& h = *std::get<std::unique_ptr<Histogram>>(s);
          const std::vector<uint64_t> counts = h.buckets();
          uint64_t cumulative = 0;
          for (size_t i = 0; i < counts.size(); ++i) {
            cumulative += counts[i];
            const std::string le = i < h.bounds().size() ? number(h.bounds()[i]) : "+Inf";
            out += name + "_bucket" + with_label(labels, "le", le) + " " + std::to_string(cumulative) + "\n";
          }
          out += name + "_sum" + labels + " " + number(h.sum()) + "\n";
          out += name + "_count" + labels + " " + std::to_string(cumulative) + "\n";
        }
      }
    }
    return out;
  }

 private:
  Family& family(const std::string& name, const std::string& help, const char* type) {
    check_name(name, "metric");
    auto [it, fresh] = families_.try_emplace(name);
    if (fresh) {
      it->second.help = help;
      it->second.type = type;
    } else if (std::strcmp(it->second.type, type) != 0) {
      throw ValueError("metrics: '" + name + "' is a " + it->second.type + ", not a " + type);
    }
    return it->second;
  }

  std::mutex mutex_;
  std::map<std::string, Family> families_;
};

Registry& registry() {
  static auto* r = new Registry;  // never destroyed: series are updated until the process ends
  return *r;
}

}  // namespace

Counter& counter(const std::string& name, const std::string& help, const Labels& labels) {
  return registry().counter_series(name, help, labels);
}

Gauge& gauge(const std::string& name, const std::string& help, const Labels& labels) {
  return registry().get<Gauge>(name, help, "gauge", labels);
}

Histogram& histogram(const std::string& name, const std::string& help, const Labels& labels,
                     const std::vector<double>& bounds) {
  return registry().get<Histogram>(name, help, "histogram", labels, bounds);
}

ActorMetrics::ActorMetrics(const std::string& actor)
    : calls(counter("troupe_actor_calls_total", "Calls an actor ran", {{"actor", actor}})),
      errors(counter("troupe_actor_errors_total", "Calls of an actor that threw", {{"actor", actor}})),
      mailbox(gauge("troupe_actor_mailbox_depth", "Calls queued for an actor, not yet running", {{"actor", actor}})),
      seconds(histogram("troupe_actor_call_seconds", "Time an actor's call ran", {{"actor", actor}})) {}

std::string exposition() { return registry().exposition(); }

}  // namespace troupe::metrics
