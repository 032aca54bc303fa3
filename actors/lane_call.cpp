#include "actors/lane_call.h"

#include "devices/backend.h"

namespace troupe::detail {

bool await_arguments(Lane& lane, const std::vector<Event>& producers, bool default_stream_producer) {
  for (const Event& e : producers) lane.wait(e);
  if (!default_stream_producer) return false;
  Event mark = default_stream_mark(lane.device());
  if (!mark.valid()) return true;
  lane.wait(mark);
  return false;
}

Event finish_call(Lane& lane) {
  Event done = lane.record();
  if (TaskBase* task = TaskBase::running_on_this_thread()) task->set_event(done);
  return done;
}

}  // namespace troupe::detail
