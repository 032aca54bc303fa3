#pragma once
// The host spans the profiler records: one log per thread that ever recorded, owned by a registry
// so the profiler can read it after the thread is gone. Internal to actors/observe.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace troupe::observe {

int64_t now_ns();  // the steady clock, in nanoseconds

struct Span {
  std::string name;
  std::string args;   // input shapes of an op, or user text
  std::string actor;  // the actor running on the thread then
  int64_t start = 0, end = -1;
  int64_t child_ns = 0;      // time in directly nested spans, for self time
  int64_t parent = -1;       // index of the enclosing open span on this thread
  uint64_t flow_out = 0;     // a fork: id of the task it starts
  uint64_t flow_in = 0;      // a task: its own id
  uint64_t remote_out = 0;   // a remote call made: its flow id (Profiler::remote_flow_id)
  uint64_t remote_in = 0;    // a remote call run here: the same id
  bool sync = false;         // an instant: the host waited for a device here
  // A collective (CollectiveSpan): its bytes and algorithm; `algorithm` non-empty marks one.
  uint64_t bytes = 0;
  std::string algorithm;
};

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
  std::atomic<uint64_t> generation{0};  // bumped by Profiler::start(): older logs are cleared lazily
  std::atomic<int64_t> origin{0};
  // The job's clock (Profiler::set_job_clock), under mutex.
  int rank = -1;
  int64_t clock_offset_ns = 0, clock_error_ns = -1;  // error -1: not measured
};

Logs& logs();
ThreadLog& this_thread_log();  // the calling thread's, cleared if the profiler restarted since

// Opens a span on this thread (nested in the innermost open one) and returns its index.
int64_t open_span(std::string name, std::string args, uint64_t flow_in = 0);
void close_span(int64_t index);
// Sets fields of this thread's span `index`, still open, under its log's lock.
template <class Edit>
void edit_span(int64_t index, Edit&& edit) {
  ThreadLog& log = this_thread_log();
  std::lock_guard lock(log.mutex);
  if (index >= 0 && index < static_cast<int64_t>(log.events.size())) edit(log.events[index]);
}

// The finished spans of the current generation, per thread; `keep` holds their logs alive.
std::vector<std::pair<const ThreadLog*, std::vector<Span>>> snapshot(std::vector<std::shared_ptr<ThreadLog>>& keep);

}  // namespace troupe::observe
