// A 64 MB device tensor between two ranks sharing a GPU, beside the GPU's pinned-copy bandwidth.
// Rank 1 asks (a 4-byte token) and times until the tensor is on its device; rank 0 answers by
// sending it. On one host the bytes go through pinned shared memory in chunks, device-to-host on
// rank 0's stream while host-to-device runs on rank 1's (net/links/staged_link.h); TROUPE_SHM=0
// sends them as host bytes over the transport instead. host_tensor_ms: the same bytes sent from
// and received into host memory by the same path (what the network alone costs).
//
//   build/bin/troupe launch --nproc 2 -- build/bin/device_p2p_bench [--mib 64] [--json]
//   {"device":"cuda:0","path":"shared memory","mib":64,"p2p_gbs":..,"d2h_pinned_gbs":..,"ratio":..}
#include <chrono>
#include <cstdio>
#include <string>

#include "devices/backend.h"
#include "examples/command_line.h"
#include "examples/device_option.h"
#include "examples/json_line.h"
#include "examples/median_time.h"
#include "examples/run_example.h"
#include "net/process_group.h"

int main(int argc, char** argv) {
  using namespace troupe;
  int mib = 64, reps = 20;
  bool json = false;
  std::string device_name = "cuda";
  cli::App app{"a device tensor between two ranks sharing a GPU, beside a pinned copy"};
  app.add_option("--mib", mib, "tensor size in MiB")->check(cli::PositiveNumber);
  app.add_option("--reps", reps, "timed transfers")->check(cli::PositiveNumber);
  add_device_option(app, device_name);
  app.add_flag("--json", json, "one JSON line (rank 1)");
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
  return run_example("device_p2p_bench", [&] {
    const Device device = example_device(device_name);
    if (!device.is_cuda()) throw DeviceError("device_p2p_bench: --device must be a GPU, got " + device.str());
    auto world = net::init_process_group();
    if (world->size() != 2) throw ValueError("device_p2p_bench: run it on 2 ranks (troupe launch --nproc 2)");
    const int64_t n = int64_t(mib) << 18;  // f32 elements
    const double bytes = static_cast<double>(n) * 4;
    Tensor token = Tensor::zeros({1});
    if (world->rank() == 0) {
      const Tensor x = Tensor::full({n}, 1.5, DType::f32, device);
      for (int i = 0; i < reps + 2; ++i) {
        world->recv(token, 1, 1);
        world->send(x, 1, 2);
      }
      finish(device);
      // The floor: the same bytes from host memory, by the same path.
      const Tensor host_x = Tensor::full({n}, 1.5, DType::f32);
      for (int i = 0; i < reps + 2; ++i) {
        world->recv(token, 1, 4);
        world->send(host_x, 1, 5);
      }
      world->recv(token, 1, 3);  // rank 1 measured: the tensor stays alive until then
      return 0;
    }
    Tensor y = Tensor::empty({n}, DType::f32, device);
    const double p2p_s = median_seconds(
        [&] {
          world->send(token, 0, 1);
          world->recv(y, 0, 2);
          finish(device);
        },
        reps, 2);
    Tensor host_y = Tensor::empty({n}, DType::f32);
    const double host_s = median_seconds(
        [&] {
          world->send(token, 0, 4);
          world->recv(host_y, 0, 5);
        },
        reps, 2);
    world->send(token, 0, 3);
    if (y.to(Device::cpu()).to_vector<float>()[static_cast<size_t>(n - 1)] != 1.5f)
      throw ValueError("device_p2p_bench: the tensor arrived wrong");
    // The yardsticks: one pinned copy of the same bytes each way, on this rank's stream.
    const double d2h_s = median_seconds([&] { host_contiguous(y); }, reps, 2);
    const Tensor pinned = host_contiguous(y);
    Tensor back = Tensor::empty({n}, DType::f32, device);
    DeviceBackend& gpu = backend(device.type);
    const double h2d_s = median_seconds(
        [&] { gpu.copy(back.mutable_raw_data(), device, pinned.raw_data(), Device::cpu(), pinned.nbytes()); finish(device); },
        reps, 2);
    const char* shm = std::getenv("TROUPE_SHM");
    const std::string path = shm && std::string(shm) == "0" ? "host bytes" : "shared memory";
    const double gbs = bytes / p2p_s / 1e9, d2h = bytes / d2h_s / 1e9, h2d = bytes / h2d_s / 1e9;
    if (json) {
      print_json_line(nlohmann::ordered_json{{"device", device.str()},
                                             {"path", path},
                                             {"mib", mib},
                                             {"p2p_ms", rounded(p2p_s * 1e3, 3)},
                                             {"p2p_gbs", rounded(gbs, 2)},
                                             {"d2h_pinned_gbs", rounded(d2h, 2)},
                                             {"h2d_pinned_gbs", rounded(h2d, 2)},
                                             {"ratio", rounded(gbs / d2h, 3)},
                                             {"host_tensor_ms", rounded(host_s * 1e3, 3)}});
    } else {
      std::printf("%d MiB %s between two ranks (%s): %.3f ms, %.2f GB/s; pinned copy D2H %.2f GB/s, H2D %.2f GB/s "
                  "(%.2fx the D2H); the same bytes from host memory %.3f ms\n",
                  mib, device.str().c_str(), path.c_str(), p2p_s * 1e3, gbs, d2h, h2d, gbs / d2h, host_s * 1e3);
    }
    return 0;
  });
}
