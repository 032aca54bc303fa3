#include "actors/lane_call.h"

#include "devices/backend.h"

namespace troupe::detail {

bool await_default_stream(Lane& lane) {
  Event mark = default_stream_mark(lane.device());
  if (!mark.valid()) return true;
  lane.wait(mark);
  return false;
}

Event finish_call(Lane& lane, Event* done_out) {
  Event done = lane.mark();
  if (done_out)
    *done_out = done;
  else if (TaskBase* task = TaskBase::running_on_this_thread())
    task->set_event(done);
  return done;
}

}  // namespace troupe::detail
