// The profiler's switch and the spans code opens: start() installs the op recorder and the sync
// listener and clears earlier events; each scope class opens a span on its thread and closes it
// when it goes out of scope, at the cost of one relaxed load while the profiler is off.
#include "actors/observe/profiler.h"

#include "actors/observe/device_spans.h"
#include "actors/observe/op_recorder.h"
#include "actors/observe/spans.h"
#include "devices/registry.h"
#include "devices/sync.h"

namespace troupe {

using namespace observe;

namespace {

// Each host sync, an instant on the thread that waited.
void record_sync(const SyncSite& site) {
  if (!Profiler::global().recording()) return;
  const int64_t index = open_span("sync", site.op + " waits for " + site.device.str());
  edit_span(index, [](Span& s) { s.sync = true; });
  close_span(index);
}

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
  OpRegistry::global().set_observer(&op_recorder());
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

size_t Profiler::event_count() const {
  std::vector<std::shared_ptr<ThreadLog>> keep;
  size_t n = 0;
  for (auto& [log, events] : snapshot(keep)) n += events.size();
  return n;
}

void Profiler::set_thread_actor(std::string_view actor) {
  SyncAttribution::set_thread_actor(actor);  // host syncs name the actor too
  if (!global().recording()) return;
  ThreadLog& log = this_thread_log();
  std::lock_guard lock(log.mutex);
  log.actor = std::string(actor);
}

void Profiler::record_fork(uint64_t task_id) {
  if (!global().recording()) return;
  const int64_t index = open_span("fork", {});
  edit_span(index, [&](Span& s) { s.flow_out = task_id; });
  close_span(index);
}

uint64_t Profiler::remote_flow_id(int caller_rank, uint64_t request) {
  // Below 2^53 (JSON readers hold ids as doubles) and apart from fork ids, which troupe trace merge
  // moves to rank * 2^32 + id.
  return (uint64_t{1} << 52) | (static_cast<uint64_t>(caller_rank & 0xfffff) << 32) | (request & 0xffffffff);
}

void Profiler::record_remote_call(std::string_view name, uint64_t flow) {
  if (!global().recording()) return;
  const int64_t index = open_span(std::string(name), {});
  edit_span(index, [&](Span& s) { s.remote_out = flow; });
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

RemoteSpan::RemoteSpan(std::string_view name, uint64_t flow) {
  if (!Profiler::global().recording()) return;
  index_ = open_span(std::string(name), {});
  edit_span(index_, [&](Span& s) { s.remote_in = flow; });
}

RemoteSpan::~RemoteSpan() {
  if (index_ >= 0) close_span(index_);
}

CollectiveSpan::CollectiveSpan(std::string_view name, uint64_t bytes, uint64_t seq) {
  if (!Profiler::global().recording()) return;
  index_ = open_span(std::string(name), std::to_string(seq));
  edit_span(index_, [&](Span& s) {
    s.bytes = bytes;
    s.algorithm = "?";  // until set_algorithm
  });
}

void CollectiveSpan::set_algorithm(std::string_view algorithm) {
  if (index_ >= 0) edit_span(index_, [&](Span& s) { s.algorithm = std::string(algorithm); });
}

CollectiveSpan::~CollectiveSpan() {
  if (index_ >= 0) close_span(index_);
}

}  // namespace troupe
