// Remote actor costs between two ranks: the median round trip of a request carrying a 4-byte
// tensor and answered with it, the bandwidth of a request carrying 64 MB, and pipelined small
// requests per second (many in flight). Rank 0 calls an actor on rank 1, which serves.
//
//   build/bin/troupe launch --nproc 2 -- build/bin/remote_bench [--json]
//   {"rtt_us_4B":..,"gbs_64MB":..,"requests_per_s":..}
//
// The setting: TROUPE_TRANSPORT=tcp TROUPE_SHM=0 (tcp:// on one host, no shared memory).
// --wait-for FILE: rank 0 measures only once FILE exists, so that a load started beside the job
// once its ports listen (scripts/hostile_flood_bench.sh: a flood of strangers) is on throughout.
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <string>
#include <thread>

#include "examples/command_line.h"
#include "examples/json_line.h"
#include "examples/median_time.h"
#include "examples/run_example.h"
#include "net/remote/remote_actor.h"

namespace {

struct Sink {
  troupe::Tensor echo(const troupe::Tensor& x) { return x; }
  int64_t bytes(const troupe::Tensor& x) { return static_cast<int64_t>(x.nbytes()); }
};
TROUPE_ACTOR(Sink, "bench.sink", &Sink::echo, &Sink::bytes);

}  // namespace

int main(int argc, char** argv) {
  using namespace troupe;
  using namespace troupe::net;
  int round_trips = 2000, requests = 50000, window = 256, big_reps = 11;
  bool json = false;
  std::string wait_for;
  cli::App app{"remote actor round trip, bandwidth and pipelined requests"};
  app.add_option("--round-trips", round_trips, "timed 4-byte round trips");
  app.add_option("--requests", requests, "pipelined requests");
  app.add_option("--window", window, "pipelined requests in flight");
  app.add_option("--big-reps", big_reps, "timed 64 MB requests");
  app.add_option("--wait-for", wait_for, "measure once this file exists");
  app.add_flag("--json", json, "one JSON line");
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
  return run_example("remote_bench", [&] {
    auto world = init_process_group();
    if (world->size() != 2) throw ValueError("remote_bench: run it on 2 ranks (troupe launch --nproc 2)");
    RemoteActors actors(world);
    if (world->rank() == 1) {
      serve();
      return 0;
    }
    RemoteActor sink = spawn_on(1, "bench.sink");
    while (!wait_for.empty() && !std::filesystem::exists(wait_for))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const Tensor small = Tensor::scalar<float>(1.0f);
    const double rtt = median_seconds([&] { sink.request<Tensor>("echo", small).get(); }, round_trips, 200);

    const Tensor big = Tensor::ones({16 << 20});  // 64 MB
    const double big_s = median_seconds([&] { sink.request<int64_t>("bytes", big).get(); }, big_reps, 1);

    std::deque<Future<Tensor>> in_flight;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < requests; ++i) {
      if (static_cast<int>(in_flight.size()) >= window) {
        in_flight.front().get();
        in_flight.pop_front();
      }
      in_flight.push_back(sink.request<Tensor>("echo", small));
    }
    while (!in_flight.empty()) {
      in_flight.front().get();
      in_flight.pop_front();
    }
    const double pipelined_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    const double rtt_us = rtt * 1e6, gbs = static_cast<double>(big.nbytes()) / big_s / 1e9,
                 per_s = requests / pipelined_s;
    if (json) {
      print_json_line(nlohmann::ordered_json{
          {"rtt_us_4B", rounded(rtt_us, 1)}, {"gbs_64MB", rounded(gbs, 2)}, {"requests_per_s", rounded(per_s, 0)}});
    } else {
      std::printf("round trip, 4 B request and answer: %8.1f us (median of %d)\n", rtt_us, round_trips);
      std::printf("64 MB request:                      %8.2f GB/s (median of %d)\n", gbs, big_reps);
      std::printf("pipelined 4 B requests:             %8.0f /s (%d in flight)\n", per_s, window);
    }
    return 0;
  });
}
