#include "actors/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string_view>
#include <vector>

#include "devices/error.h"
#include "devices/lane.h"
#include "devices/registry.h"
#include "devices/sync.h"

namespace troupe {

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Span {
  std::string name;
  std::string args;   // input shapes of an op, or user text
  std::string actor;  // the actor running on the thread then
  int64_t start = 0, end = -1;
  int64_t child_ns = 0;  // time in directly nested spans, for self time
  int64_t parent = -1;   // index of the enclosing open span on this thread
  uint64_t flow_out = 0; // a fork: id of the task it starts
  uint64_t flow_in = 0;  // a task: its own id
  uint64_t remote_out = 0;  // a remote call made: its flow id (Profiler::remote_flow_id)
  uint64_t remote_in = 0;   // a remote call run here: the same id
  bool sync = false;        // an instant: the host waited for a device here
  // A collective (CollectiveSpan): its bytes and algorithm; `algorithm` non-empty marks one.
  uint64_t bytes = 0;
  std::string algorithm;
};

// An op's span on a device lane (a GPU actor's stream, or a device's default stream), timed by the
// events queued before and after it; on a host lane, whose ops run on its own thread, by the host
// clock (host_start, host_end) as they run.
struct DeviceSpan {
  std::string lane;
  std::string name;
  Event start, end;
  int64_t host_start = 0, host_end = 0;
};

// Per device: an event and the host time at which it was done, to place device events on the
// host's clock (within the time the device took to reach the event when it was recorded).
struct DeviceClock {
  Event reference;
  int64_t host_ns = 0;
};

struct DeviceSpans {
  std::mutex mutex;
  std::vector<DeviceSpan> spans;
  std::map<std::pair<int, int>, DeviceClock> clocks;
};

DeviceSpans& device_spans() {
  static DeviceSpans* d = new DeviceSpans;
  return *d;
}

// One per thread that ever recorded; owned by the registry below so the profiler can read it
// after the thread is gone.
struct ThreadLog {
  std::mutex mutex;  // uncontended while recording; lets export read a thread still running
  int tid = 0;
  std::string actor = "main";
  std::vector<Span> events;
  int64_t open = -1;  // innermost open span
  uint64_t generation = 0;
};

struct Logs {
  std::mutex mutex;
  std::vector<std::shared_ptr<ThreadLog>> threads;
  std::atomic<uint64_t> generation{0};  // bumped by start(): older logs are cleared lazily
  std::atomic<int64_t> origin{0};
  // The job's clock (set_job_clock), under mutex.
  int rank = -1;
  int64_t clock_offset_ns = 0, clock_error_ns = -1;  // error -1: not measured
};

Logs& logs() {
  static Logs* l = new Logs;
  return *l;
}

ThreadLog& this_thread_log() {
  thread_local std::shared_ptr<ThreadLog> log = [] {
    auto l = std::make_shared<ThreadLog>();
    std::lock_guard lock(logs().mutex);
    l->tid = static_cast<int>(logs().threads.size());
    logs().threads.push_back(l);
    return l;
  }();
  if (log->generation != logs().generation.load(std::memory_order_relaxed)) {
    std::lock_guard lock(log->mutex);
    log->events.clear();
    log->open = -1;
    log->generation = logs().generation;
  }
  return *log;
}

int64_t open_span(std::string name, std::string args, uint64_t flow_in = 0) {
  ThreadLog& log = this_thread_log();
  std::lock_guard lock(log.mutex);
  Span e;
  e.name = std::move(name);
  e.args = std::move(args);
  e.actor = log.actor;
  e.start = now_ns();
  e.parent = log.open;
  e.flow_in = flow_in;
  log.events.push_back(std::move(e));
  log.open = static_cast<int64_t>(log.events.size()) - 1;
  return log.open;
}

void close_span(int64_t index) {
  ThreadLog& log = this_thread_log();
  std::lock_guard lock(log.mutex);
  if (index < 0 || index >= static_cast<int64_t>(log.events.size())) return;  // profiler restarted meanwhile
  Span& e = log.events[index];
  e.end = now_ns();
  if (e.parent >= 0) log.events[e.parent].child_ns += e.end - e.start;
  log.open = e.parent;
}

void record_sync(const SyncSite& site) {
  if (!Profiler::global().recording()) return;
  const int64_t index = open_span("sync", site.op + " waits for " + site.device.str());
  ThreadLog& log = this_thread_log();
  {
    std::lock_guard lock(log.mutex);
    log.events[index].sync = true;
  }
  close_span(index);
}

// An event now on the device's lane for this thread (its lane, else the default stream).
Event mark(Device device, std::string& lane_name) {
  if (Lane* lane = Lane::current(device)) {
    lane_name = device.str() + " " + (lane->name().empty() ? "lane" : lane->name());
    return lane->record();
  }
  lane_name = device.str() + " default stream";
  return default_stream_mark(device);
}

void ensure_clock(Device device) {
  const std::pair<int, int> key{static_cast<int>(device.type), device.index};
  {
    std::lock_guard lock(device_spans().mutex);
    if (device_spans().clocks.contains(key)) return;
  }
  DeviceClock clock{default_stream_mark(device), 0};
  if (clock.reference.valid()) clock.reference.state()->wait();  // the profiler's own wait, not counted as a sync
  clock.host_ns = now_ns();
  std::lock_guard lock(device_spans().mutex);
  device_spans().clocks.emplace(key, std::move(clock));
}

// Records every registry op call while the profiler is on: a span on the calling thread and, for
// an op on a device or run by a host lane, a span on that lane.
class OpRecorder final : public OpObserver {
 public:
  struct Token {
    int64_t index;
    Device device;
    std::string lane;
    std::string op;
    Event start;
    int64_t host_start = -1;  // an op on a host lane
  };
  void* begin(std::string_view op, const std::vector<Tensor>& inputs) override {
    std::string shapes;
    for (auto& t : inputs) shapes += (shapes.empty() ? "" : ", ") + t.meta().str();
    auto* token = new Token{open_span(std::string(op), std::move(shapes)), Device::cpu(), {}, std::string(op), {}};
    if (!inputs.empty() && !inputs[0].device().is_cpu()) {
      token->device = inputs[0].device();
      ensure_clock(token->device);
      token->start = mark(token->device, token->lane);
    } else if (Lane* lane = Lane::current(Device::cpu())) {
      token->lane = "cpu " + (lane->name().empty() ? std::string("host lane") : lane->name());
      token->host_start = now_ns();
    }
    return token;
  }
  void end(void* opaque) override {
    auto* token = static_cast<Token*>(opaque);
    close_span(token->index);
    if (token->start.valid()) {
      std::string lane;
      Event end = mark(token->device, lane);
      std::lock_guard lock(device_spans().mutex);
      device_spans().spans.push_back({std::move(token->lane), std::move(token->op), std::move(token->start), std::move(end)});
    } else if (token->host_start >= 0) {
      const int64_t host_end = now_ns();
      std::lock_guard lock(device_spans().mutex);
      device_spans().spans.push_back({std::move(token->lane), std::move(token->op), {}, {}, token->host_start, host_end});
    }
    delete token;
  }
};

OpRecorder op_recorder;

}  // namespace

Profiler& Profiler::global() {
  static Profiler* p = new Profiler;
  return *p;
}

void Profiler::start() {
  {
    std::lock_guard lock(logs().mutex);
    ++logs().generation;
    logs().origin = now_ns();
  }
  {
    std::lock_guard lock(device_spans().mutex);
    device_spans().spans.clear();
    device_spans().clocks.clear();
  }
  OpRegistry::global().set_observer(&op_recorder);
  set_sync_listener(record_sync);
  set_event_timing(true);  // the device lanes' spans are timed by their events
  recording_.store(true, std::memory_order_relaxed);
}

void Profiler::stop() {
  recording_.store(false, std::memory_order_relaxed);
  set_event_timing(false);
  OpRegistry::global().set_observer(nullptr);
  set_sync_listener(nullptr);
}

void Profiler::set_thread_actor(std::string_view actor) {
  SyncAttribution::set_thread_actor(actor);  // host syncs name the actor too
  if (!global().recording()) return;
  ThreadLog& log = this_thread_log();
  std::lock_guard lock(log.mutex);
  log.actor = std::string(actor);
}

uint64_t Profiler::remote_flow_id(int caller_rank, uint64_t request) {
  // Below 2^53 (JSON readers hold ids as doubles) and apart from fork ids, which troupe trace merge
  // moves to rank * 2^32 + id.
  return (uint64_t{1} << 52) | (static_cast<uint64_t>(caller_rank & 0xfffff) << 32) | (request & 0xffffffff);
}

void Profiler::record_remote_call(std::string_view name, uint64_t flow) {
  if (!global().recording()) return;
  const int64_t index = open_span(std::string(name), {});
  {
    ThreadLog& log = this_thread_log();
    std::lock_guard lock(log.mutex);
    log.events[index].remote_out = flow;
  }
  close_span(index);
}

void Profiler::set_job_clock(int rank, int64_t offset_ns, int64_t error_ns) {
  std::lock_guard lock(logs().mutex);
  logs().rank = rank;
  logs().clock_offset_ns = offset_ns;
  logs().clock_error_ns = error_ns;
}

void Profiler::start_job_trace_from_env() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* dir = std::getenv("TROUPE_TRACE");
    if (!dir || !*dir) return;
    global().start();
    std::atexit([] {
      const char* dir = std::getenv("TROUPE_TRACE");
      int rank = logs().rank;
      if (rank < 0)
        for (const char* name : {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
          if (const char* v = std::getenv(name); v && *v && rank < 0) rank = std::atoi(v);
      const std::string path = std::string(dir) + "/rank-" + std::to_string(std::max(rank, 0)) + ".json";
      try {
        std::filesystem::create_directories(dir);
        global().stop();
        global().export_chrome_trace(path);
      } catch (const std::exception& e) {
        std::cerr << "troupe: TROUPE_TRACE: " << e.what() << "\n";
      }
    });
  });
}

RemoteSpan::RemoteSpan(std::string_view name, uint64_t flow) {
  if (!Profiler::global().recording()) return;
  index_ = open_span(std::string(name), {});
  ThreadLog& log = this_thread_log();
  std::lock_guard lock(log.mutex);
  log.events[index_].remote_in = flow;
}

RemoteSpan::~RemoteSpan() {
  if (index_ >= 0) close_span(index_);
}

CollectiveSpan::CollectiveSpan(std::string_view name, uint64_t bytes, uint64_t seq) {
  if (!Profiler::global().recording()) return;
  index_ = open_span(std::string(name), std::to_string(seq));
  ThreadLog& log = this_thread_log();
  std::lock_guard lock(log.mutex);
  log.events[index_].bytes = bytes;
  log.events[index_].algorithm = "?";  // until set_algorithm
}

void CollectiveSpan::set_algorithm(std::string_view algorithm) {
  if (index_ < 0) return;
  ThreadLog& log = this_thread_log();
  std::lock_guard lock(log.mutex);
  if (index_ < static_cast<int64_t>(log.events.size())) log.events[index_].algorithm = std::string(algorithm);
}

CollectiveSpan::~CollectiveSpan() {
  if (index_ >= 0) close_span(index_);
}

void Profiler::record_fork(uint64_t task_id) {
  if (!global().recording()) return;
  const int64_t index = open_span("fork", {});
  {
    ThreadLog& log = this_thread_log();
    std::lock_guard lock(log.mutex);
    log.events[index].flow_out = task_id;
  }
  close_span(index);
}

ProfileScope::ProfileScope(std::string_view name, std::string_view args) {
  if (Profiler::global().recording()) index_ = open_span(std::string(name), std::string(args));
}

ProfileScope::~ProfileScope() {
  if (index_ >= 0) close_span(index_);
}

TaskSpan::TaskSpan(uint64_t task_id) {
  if (Profiler::global().recording()) index_ = open_span("task", {}, task_id);
}

TaskSpan::~TaskSpan() {
  if (index_ >= 0) close_span(index_);
}

namespace {

// Snapshot of the finished spans of the current generation, per thread.
std::vector<std::pair<const ThreadLog*, std::vector<Span>>> snapshot(std::vector<std::shared_ptr<ThreadLog>>& keep) {
  std::lock_guard lock(logs().mutex);
  keep = logs().threads;
  std::vector<std::pair<const ThreadLog*, std::vector<Span>>> out;
  for (auto& t : keep) {
    std::lock_guard thread_lock(t->mutex);
    if (t->generation != logs().generation) continue;
    std::vector<Span> done;
    for (auto& e : t->events)
      if (e.end >= 0) done.push_back(e);
    out.emplace_back(t.get(), std::move(done));
  }
  return out;
}

}  // namespace

namespace {

// Writes the trace as it goes, one event a line, instead of building it as a JSON document first:
// a long job's rank holds millions of events, and `troupe trace merge` reads lines like these fast.
class TraceWriter {
 public:
  explicit TraceWriter(const std::string& path) : out_(path, std::ios::binary) {
    if (!out_) throw IOError("export_chrome_trace: cannot write " + path);
  }

  // Starts an event: {"ph":"X","name":"...","pid":P,"tid":T
  TraceWriter& begin(const char* ph, std::string_view name, int pid, int tid) {
    buf_ += first_ ? "\n{\"ph\":\"" : ",\n{\"ph\":\"";
    first_ = false;
    buf_ += ph;
    buf_ += "\",\"name\":";
    string(name);
    buf_ += ",\"pid\":";
    buf_ += std::to_string(pid);
    buf_ += ",\"tid\":";
    buf_ += std::to_string(tid);
    return *this;
  }
  // ,"key":"value"
  TraceWriter& text(const char* key, std::string_view value) {
    this->key(key);
    string(value);
    return *this;
  }
  TraceWriter& number(const char* key, uint64_t value) {
    this->key(key);
    buf_ += std::to_string(value);
    return *this;
  }
  // Microseconds with nanoseconds' digits: 12.345
  TraceWriter& micros(const char* key, int64_t ns) {
    this->key(key);
    char digits[32];
    std::snprintf(digits, sizeof digits, "%s%lld.%03lld", ns < 0 ? "-" : "", static_cast<long long>(std::llabs(ns) / 1000),
                  static_cast<long long>(std::llabs(ns) % 1000));
    buf_ += digits;
    return *this;
  }
  // ,"args":{ ... } around what open/close write in between; raw adds text as it is.
  TraceWriter& open(const char* key) {
    this->key(key);
    buf_ += '{';
    fresh_ = true;
    return *this;
  }
  TraceWriter& close() {
    buf_ += '}';
    fresh_ = false;
    return *this;
  }
  void end() {
    buf_ += '}';
    if (buf_.size() > (1 << 20)) flush();
  }
  void raw(std::string_view text) { buf_ += text; }

  void flush() {
    out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    buf_.clear();
  }
  void finish(const std::string& path) {
    flush();
    out_.close();
    if (!out_) throw IOError("export_chrome_trace: writing " + path + " failed");
  }

 private:
  void key(const char* key) {
    buf_ += fresh_ ? "\"" : ",\"";
    fresh_ = false;
    buf_ += key;
    buf_ += "\":";
  }
  void string(std::string_view s) {
    buf_ += '"';
    for (char c : s) {
      if (c == '"' || c == '\\') {
        buf_ += '\\';
        buf_ += c;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        char esc[8];
        std::snprintf(esc, sizeof esc, "\\u%04x", static_cast<unsigned>(c));
        buf_ += esc;
      } else {
        buf_ += c;
      }
    }
    buf_ += '"';
  }

  std::ofstream out_;
  std::string buf_;
  bool first_ = true, fresh_ = false;
};

// A lane's span on the host's clock: a device span's events placed by its device's clock (waiting
// for them: the profiler's own waits, not counted as syncs), a host lane's as it ran. Under
// device_spans().mutex.
std::pair<int64_t, int64_t> host_interval(DeviceSpan& span) {
  if (!span.start.valid()) return {span.host_start, span.host_end};
  const Device device = span.start.device();
  const DeviceClock& clock = device_spans().clocks.at({static_cast<int>(device.type), device.index});
  span.start.state()->wait();
  span.end.state()->wait();
  return {clock.host_ns + static_cast<int64_t>(clock.reference.elapsed_ms(span.start) * 1e6),
          clock.host_ns + static_cast<int64_t>(clock.reference.elapsed_ms(span.end) * 1e6)};
}

// The device lanes, as process 2: one lane per stream (or host lane), each op's span timed by its
// events (or, on a host lane, the host clock).
void write_device_lanes(TraceWriter& w, int64_t origin) {
  std::lock_guard lock(device_spans().mutex);
  if (device_spans().spans.empty()) return;
  w.begin("M", "process_name", 2, 0).open("args").text("name", "devices").close().end();
  std::map<std::string, int> lanes;
  for (DeviceSpan& span : device_spans().spans) {
    auto [it, added] = lanes.emplace(span.lane, static_cast<int>(lanes.size()));
    if (added) w.begin("M", "thread_name", 2, it->second).open("args").text("name", span.lane).close().end();
    const auto [start, end] = host_interval(span);
    w.begin("X", span.name, 2, it->second).text("cat", "kernel").micros("ts", start - origin)
        .micros("dur", std::max<int64_t>(1, end - start)).end();
  }
}

}  // namespace

size_t Profiler::event_count() const {
  std::vector<std::shared_ptr<ThreadLog>> keep;
  size_t n = 0;
  for (auto& [log, events] : snapshot(keep)) n += events.size();
  return n;
}

void Profiler::export_chrome_trace(const std::string& path) const {
  std::vector<std::shared_ptr<ThreadLog>> keep;
  auto threads = snapshot(keep);
  const int64_t origin = logs().origin;
  TraceWriter w(path);
  {
    // The clock first, so that a reader going through the file once knows the offset before the events.
    std::lock_guard lock(logs().mutex);
    w.raw("{\"troupe\":{\"rank\":" + std::to_string(logs().rank) + ",\"origin_ns\":" + std::to_string(origin) +
          ",\"clock_offset_ns\":" + std::to_string(logs().clock_offset_ns) +
          ",\"clock_error_ns\":" + std::to_string(logs().clock_error_ns) + "},\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
  }
  for (auto& [log, events] : threads) {
    // Lane name: the actors seen on this thread.
    std::vector<std::string> actors;
    for (auto& e : events)
      if (std::find(actors.begin(), actors.end(), e.actor) == actors.end()) actors.push_back(e.actor);
    std::string lane = "thread " + std::to_string(log->tid);
    for (size_t i = 0; i < actors.size(); ++i) lane += (i ? ", " : ": ") + actors[i];
    const int tid = log->tid;
    w.begin("M", "thread_name", 1, tid).open("args").text("name", lane).close().end();
    for (auto& e : events) {
      const int64_t ts = e.start - origin;
      if (e.sync) {  // an instant on the thread that waited
        w.begin("i", "sync", 1, tid).text("s", "t").text("cat", "sync").micros("ts", ts);
        w.open("args").text("actor", e.actor).text("what", e.args).close().end();
        continue;
      }
      const bool remote = e.remote_in || e.remote_out, collective = !e.algorithm.empty();
      w.begin("X", e.name, 1, tid)
          .text("cat", collective ? "collective" : remote ? "remote" : e.flow_in ? "task" : e.flow_out ? "fork" : "op")
          .micros("ts", ts).micros("dur", std::max<int64_t>(1, e.end - e.start));
      w.open("args").text("actor", e.actor);
      if (collective)
        w.number("bytes", e.bytes).text("algorithm", e.algorithm).raw(",\"collective\":" + e.args);
      else if (!e.args.empty())
        w.text("inputs", e.args);
      if (e.flow_in) w.number("task", e.flow_in);
      w.close().end();
      if (e.flow_out) w.begin("s", "fork", 1, tid).text("cat", "fork").number("id", e.flow_out).micros("ts", ts).end();
      if (e.flow_in)
        w.begin("f", "fork", 1, tid).text("bp", "e").text("cat", "fork").number("id", e.flow_in).micros("ts", ts).end();
      if (e.remote_out)
        w.begin("s", "remote call", 1, tid).text("cat", "remote").number("id", e.remote_out).micros("ts", ts).end();
      if (e.remote_in)
        w.begin("f", "remote call", 1, tid).text("bp", "e").text("cat", "remote").number("id", e.remote_in)
            .micros("ts", ts).end();
    }
  }
  write_device_lanes(w, origin);
  w.raw("\n]}\n");
  w.finish(path);
}

std::string Profiler::device_table(size_t max_rows) const {
  struct Row {
    std::string name;
    int64_t calls = 0, total = 0;
  };
  std::map<std::string, Row> rows;
  int64_t all = 0;
  {
    std::lock_guard lock(device_spans().mutex);
    for (DeviceSpan& span : device_spans().spans) {
      const auto [start, end] = host_interval(span);
      Row& r = rows[span.name];
      r.name = span.name;
      ++r.calls;
      r.total += end - start;
      all += end - start;
    }
  }
  std::vector<Row> sorted;
  for (auto& [name, r] : rows) sorted.push_back(r);
  std::sort(sorted.begin(), sorted.end(), [](const Row& a, const Row& b) { return a.total > b.total; });
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %8s %12s %12s %8s\n", "Name", "Calls", "Lane ms", "Avg us", "Share");
  os << line << std::string(72, '-') << "\n";
  for (size_t i = 0; i < sorted.size() && i < max_rows; ++i) {
    const Row& r = sorted[i];
    std::snprintf(line, sizeof line, "%-28.28s %8lld %12.3f %12.2f %7.1f%%\n", r.name.c_str(),
                  static_cast<long long>(r.calls), r.total / 1e6, r.total / 1e3 / r.calls,
                  all ? 100.0 * r.total / all : 0.0);
    os << line;
  }
  return os.str();
}

std::string Profiler::table(size_t max_rows) const {
  struct Row {
    std::string name;
    int64_t calls = 0, total = 0, self = 0;
  };
  std::vector<std::shared_ptr<ThreadLog>> keep;
  std::map<std::string, Row> rows;
  int64_t all_self = 0;
  for (auto& [log, events] : snapshot(keep))
    for (auto& e : events) {
      if (e.sync) continue;
      Row& r = rows[e.name];
      r.name = e.name;
      ++r.calls;
      r.total += e.end - e.start;
      r.self += e.end - e.start - e.child_ns;
      all_self += e.end - e.start - e.child_ns;
    }
  std::vector<Row> sorted;
  for (auto& [name, r] : rows) sorted.push_back(r);
  std::sort(sorted.begin(), sorted.end(), [](const Row& a, const Row& b) { return a.total > b.total; });
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %8s %12s %12s %12s %8s\n", "Name", "Calls", "Total ms", "Self ms",
                "Avg us", "Self %");
  os << line << std::string(85, '-') << "\n";
  for (size_t i = 0; i < sorted.size() && i < max_rows; ++i) {
    const Row& r = sorted[i];
    std::snprintf(line, sizeof line, "%-28.28s %8lld %12.3f %12.3f %12.2f %7.1f%%\n", r.name.c_str(),
                  static_cast<long long>(r.calls), r.total / 1e6, r.self / 1e6, r.total / 1e3 / r.calls,
                  all_self ? 100.0 * r.self / all_self : 0.0);
    os << line;
  }
  return os.str();
}

}  // namespace troupe
