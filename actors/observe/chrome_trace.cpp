// Profiler::export_chrome_trace: the spans as a Chrome trace (chrome://tracing, Perfetto). Host
// threads are process 1, one lane per thread named by the actors seen on it, with flow arrows from
// each fork to its task and from a remote call to the span that ran it; device lanes are process 2.
// The trace opens with this rank's clock, for `troupe trace merge`.
#include <algorithm>
#include <map>

#include "actors/observe/device_spans.h"
#include "actors/observe/profiler.h"
#include "actors/observe/spans.h"
#include "actors/observe/trace_writer.h"

namespace troupe {

using namespace observe;

namespace {

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

}  // namespace troupe
