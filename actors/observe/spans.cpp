// The per-thread span logs: a thread's first span registers its log; Profiler::start() bumps the
// generation, and each log clears itself when its thread next records.
#include "actors/observe/spans.h"

#include <chrono>

namespace troupe::observe {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

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

int64_t open_span(std::string name, std::string args, uint64_t flow_in) {
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

}  // namespace troupe::observe
