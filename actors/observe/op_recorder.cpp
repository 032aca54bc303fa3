#include "actors/observe/op_recorder.h"

#include "actors/observe/device_spans.h"
#include "actors/observe/spans.h"
#include "devices/lane.h"

namespace troupe::observe {

namespace {

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

}  // namespace

OpObserver& op_recorder() {
  static OpRecorder recorder;
  return recorder;
}

}  // namespace troupe::observe
