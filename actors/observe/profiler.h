#pragma once
// Profiler: records ops, tasks and user scopes per thread while on, then exports a Chrome trace
// (chrome://tracing, Perfetto: one lane per thread, flow arrows from each fork to its task; ops
// queued on a device also on one lane per stream, timed by events, and ops a host lane runs on one
// lane per host lane; each host sync an instant on the thread that waited) and a summary table
// like PyTorch's key_averages().table(). The trace is written as it goes, one event a line.
//
//   Profiler& p = Profiler::global();
//   p.start();
//   { ProfileScope scope("forward"); y = model(x); }
//   p.stop();
//   p.export_chrome_trace("trace.json");
//   std::cout << p.table() << p.device_table();
//
// Off, it costs one relaxed atomic load per op, fork and scope.
//
// A job's trace: with TROUPE_TRACE=DIR (or `troupe launch --trace DIR`) every rank starts
// recording when its runtime or transport starts and writes DIR/rank-N.json at exit, with its
// clock's offset to rank 0's (measured by the transport at connect); remote calls are flow arrows
// from the caller's "remote call" span to the callee's span, which `troupe trace merge DIR -o
// job.json` joins into one trace, a process per rank.
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace troupe {

class Profiler {
 public:
  static Profiler& global();

  void start();  // clears earlier events
  void stop();
  bool recording() const { return recording_.load(std::memory_order_relaxed); }

  void export_chrome_trace(const std::string& path) const;
  // Rows sorted by total time: name, calls, total ms, self ms, average us, share of all self time.
  std::string table(size_t max_rows = 25) const;
  // The ops' time on their lanes (GPU streams timed by their events, host lanes by the clock), as
  // PyTorch's table gives CUDA time: name, calls, lane ms, average us, share of all lane time.
  // Waits for the device to reach the recorded events.
  std::string device_table(size_t max_rows = 25) const;
  size_t event_count() const;

  // Names the lane of the calling thread's current actor ("worker 0", a module's name).
  static void set_thread_actor(std::string_view actor);
  static void record_fork(uint64_t task_id);

  // Remote calls: a flow id unique in the job (the caller's rank and its request number), the
  // caller's instant span that starts the arrow (RemoteSpan ends it on the callee).
  static uint64_t remote_flow_id(int caller_rank, uint64_t request);
  static void record_remote_call(std::string_view name, uint64_t flow);

  // TROUPE_TRACE=DIR: starts recording (once per process) and writes DIR/rank-N.json at exit.
  static void start_job_trace_from_env();
  // This rank and its clock's offset to rank 0's (rank 0 clock = this clock + offset), with the
  // bound on the offset's error, written into the trace for `troupe trace merge`.
  static void set_job_clock(int rank, int64_t offset_ns, int64_t error_ns);

 private:
  std::atomic<bool> recording_{false};
};

// A named span on this thread (like torch.profiler.record_function).
class ProfileScope {
 public:
  explicit ProfileScope(std::string_view name, std::string_view args = {});
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  int64_t index_ = -1;
};

// The span of a remote call on the rank that runs it; the end of the arrow from its caller.
class RemoteSpan {
 public:
  RemoteSpan(std::string_view name, uint64_t flow);
  ~RemoteSpan();
  RemoteSpan(const RemoteSpan&) = delete;
  RemoteSpan& operator=(const RemoteSpan&) = delete;

 private:
  int64_t index_ = -1;
};

// A collective's span on each rank that takes part (net/collectives): args bytes, algorithm and the
// collective's number, the same on every rank, so `troupe trace merge` lines them up. The
// algorithm is chosen while it runs: set_algorithm before the span ends.
class CollectiveSpan {
 public:
  CollectiveSpan(std::string_view name, uint64_t bytes, uint64_t seq);
  ~CollectiveSpan();
  void set_algorithm(std::string_view algorithm);
  CollectiveSpan(const CollectiveSpan&) = delete;
  CollectiveSpan& operator=(const CollectiveSpan&) = delete;

 private:
  int64_t index_ = -1;
};

// The span of a forked task; the end of the flow arrow from its fork.
class TaskSpan {
 public:
  explicit TaskSpan(uint64_t task_id);
  ~TaskSpan();
  TaskSpan(const TaskSpan&) = delete;
  TaskSpan& operator=(const TaskSpan&) = delete;

 private:
  int64_t index_ = -1;
};

}  // namespace troupe
