#pragma once
// --device for the examples, in one place: cpu (the default), cuda or cuda:N, checked when the
// example starts, so each says the same thing on a machine without a GPU; and device timing.
//
//   std::string device_name = "cpu";
//   add_device_option(app, device_name);
//   TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
//   return run_example("x", [&] {
//     const Device device = example_device(device_name);   // DeviceError naming --device without a GPU
//     median_seconds([&] { model(x); finish(device); }, reps);
//   });
//
// Device work is queued, not done, when a call returns: a benchmark times it to the host's wait in
// finish(), which is one counted host sync (devices/sync.h) per timed run and nothing on the cpu.
#include <string>

#include "devices/backend.h"
#include "devices/error.h"
#include "devices/lane.h"
#include "examples/command_line.h"

namespace troupe {

inline void add_device_option(cli::App& app, std::string& device_name) {
  app.add_option("--device", device_name, "where the work runs: cpu, cuda or cuda:N")->capture_default_str();
}

// The device named by --device: DeviceError (naming the option and why) when it cannot be used.
inline Device example_device(const std::string& device_name) {
  const Device device = Device::parse(device_name);
  if (device.is_cpu()) return device;
  if (!has_backend(DeviceType::cuda))
    throw DeviceError("--device " + device_name + ": no GPU here: " + cuda_unavailable_reason());
  const int count = backend(DeviceType::cuda).device_count();
  if (device.index >= count)
    throw DeviceError("--device " + device_name + ": this machine has " + std::to_string(count) + " CUDA device(s)");
  return device;
}

// The host waits for the work queued so far on the device's default stream (where threads without a
// lane queue theirs); nothing on the cpu. Work on a lane is waited for with that lane's synchronize().
inline void finish(Device device) {
  if (!device.is_cpu()) default_stream_mark(device).synchronize("finish");
}

}  // namespace troupe
