// What a call to an actor that owns a lane costs the caller, and what a hand-off between two such
// actors costs the host: the figures behind "GPU actors own CUDA streams".
//
//   lane_bench --device cuda --json     # a GPU actor: enqueue cost per call, host syncs per hand-off
//   lane_bench --device cpu             # the same protocol on host lanes (no GPU needed)
//
// enqueue_us: median wall time of fork + wait of one call that queues one small kernel on the actor's
// idle lane (the Future completes when the kernel is queued, so this is the caller's whole cost);
// to_module_us, in_module_us, back_us: its parts (medians of each), from fork to the module's code,
// the module's op, and from the op to wait's return (the completion event and the Future).
// op_us: the same op called on this thread, no actor; lane_call_us: that op as a lane's call on this
// thread (arguments awaited, completion event), no actor; fork_us: what fork alone costs the caller; pipelined_us: the cost per call with all calls in
// flight at once (bounded by the device's own time per call once its queue is full).
// handoff_syncs: host waits counted (devices/sync.h) while a tensor goes from one lane actor to
// another and that one's call is queued: 0 means the consumer waited on the device, not the host.
// per_call: what one call (fork + wait, back to back) makes: heap allocations (operator new), and,
// with the CUDA runtime stub preloaded (tests/support/cuda_stub: the host part of a GPU call on a
// machine without a GPU), mutex locks, CUDA events recorded, cudaGetDevice calls, stream waits.
//
//   LD_PRELOAD=build/lib/libtroupe_cuda_stub.so lane_bench --device cuda --json
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <new>
#include <vector>

#include "actors/fork.h"
#include "actors/lane_call.h"
#include "devices/lane.h"
#include "devices/ops.h"
#include "devices/sync.h"
#include "examples/command_line.h"
#include "examples/device_option.h"
#include "examples/json_line.h"
#include "examples/run_example.h"
#include "tests/support/cuda_stub/cuda_stub.h"

// Every heap allocation of the process (the libraries' too) passes here, so a call's can be counted.
namespace {
std::atomic<uint64_t> heap_allocations{0};
void* counted_allocation(std::size_t n, std::size_t alignment) {
  heap_allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = alignment <= alignof(std::max_align_t) ? std::malloc(n ? n : 1)
                                                   : std::aligned_alloc(alignment, (n + alignment - 1) / alignment * alignment);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace
void* operator new(std::size_t n) { return counted_allocation(n, 0); }
void* operator new[](std::size_t n) { return counted_allocation(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_allocation(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_allocation(n, static_cast<std::size_t>(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

using namespace troupe;

namespace {

using Clock = std::chrono::steady_clock;

// When the module's call began and ended its op: splits a call's time into the way to the module,
// the op, and the way back (the lane's completion event, the Future).
struct Stamps {
  Clock::time_point entered, left;
};

struct Scale {
  Tensor factor;
  Stamps* stamps = nullptr;
  Tensor operator()(const Tensor& x) const {
    if (stamps) stamps->entered = Clock::now();
    Tensor y = mul(x, factor);
    if (stamps) stamps->left = Clock::now();
    return y;
  }
  void to(Device d) { factor = factor.to(d); }
};

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

// The preloaded CUDA runtime stub's counters, or nullptr under the real runtime.
const CudaStubCounts* stub_counts() {
  auto* counts = reinterpret_cast<const CudaStubCounts* (*)()>(dlsym(RTLD_DEFAULT, "troupe_cuda_stub_counts"));
  return counts ? counts() : nullptr;
}

// What `calls` calls made, per call: allocations always, the rest only with the stub preloaded.
nlohmann::ordered_json per_call_counts(int calls, const std::function<void()>& call) {
  const CudaStubCounts* stub = stub_counts();
  const CudaStubCounts zero;
  const CudaStubCounts& c = stub ? *stub : zero;
  const uint64_t allocations = heap_allocations.load(), mutexes = c.mutex_locks.load(), rwlocks = c.rwlock_locks.load(),
                 events = c.events_recorded.load(), get_device = c.get_device.load(), set_device = c.set_device.load(),
                 waits = c.stream_waits.load(), queries = c.queries.load(), cuda_calls = c.calls.load(),
                 launches = c.launches.load();
  for (int i = 0; i < calls; ++i) call();
  auto per = [&](uint64_t now, uint64_t before) { return rounded(double(now - before) / calls, 2); };
  nlohmann::ordered_json out{{"heap_allocations", per(heap_allocations.load(), allocations)}};
  if (!stub) return out;
  out["mutex_locks"] = per(c.mutex_locks.load(), mutexes);
  out["rwlock_locks"] = per(c.rwlock_locks.load(), rwlocks);
  out["cuda_calls"] = per(c.calls.load(), cuda_calls);
  out["kernel_launches"] = per(c.launches.load(), launches);
  out["events_recorded"] = per(c.events_recorded.load(), events);
  out["stream_waits"] = per(c.stream_waits.load(), waits);
  out["queries"] = per(c.queries.load(), queries);
  out["cuda_get_device"] = per(c.get_device.load(), get_device);
  out["cuda_set_device"] = per(c.set_device.load(), set_device);
  return out;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  return run_example("lane_bench", [&] {
    cli::App app("A call to a lane actor: the caller's cost, and host syncs per hand-off");
    std::string device_name = "cpu";
    int calls = 2000;
    bool json = false;
    app.add_option("--device", device_name, "cpu (host lanes) or cuda[:N]");
    app.add_option("--calls", calls, "calls timed")->check(cli::PositiveNumber);
    app.add_flag("--json", json, "one JSON line of figures");
    TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
    const Device device = Device::parse(device_name);
    const ActorOptions first_options{.name = "first", .device = device, .host_lane = true};
    const ActorOptions second_options{.name = "second", .device = device, .host_lane = true};
    Stamps stamps;  // written by first's calls, read after their waits
    ModuleActor<Scale> first(first_options, Scale{Tensor::full({1}, 2.0f), &stamps});
    ModuleActor<Scale> second(second_options, Scale{Tensor::full({1}, 0.5f)});
    Tensor x = Tensor::ones({256}).to(device);

    // The caller's cost per call: fork and wait, the kernel only queued.
    for (int i = 0; i < 100; ++i) wait(fork(first, x));
    first.lane()->synchronize();
    std::vector<double> us, to_module_us, in_module_us, back_us;
    // Each call finds the lane idle (the wait after it is not timed): back to back, the device's queue
    // fills and a launch waits for room, which times the device's work instead of the enqueue.
    for (int i = 0; i < calls; ++i) {
      const auto start = Clock::now();
      Tensor y = wait(fork(first, x));
      const auto end = Clock::now();
      us.push_back(micros(end - start));
      to_module_us.push_back(micros(stamps.entered - start));
      in_module_us.push_back(micros(stamps.left - stamps.entered));
      back_us.push_back(micros(end - stamps.left));
      first.lane()->synchronize();
    }
    first.lane()->synchronize();
    const double enqueue_us = median(us);
    const bool stubbed = stub_counts() != nullptr;
    // Counted after the timing, back to back: the same calls, without a synchronize between them.
    const nlohmann::ordered_json per_call = per_call_counts(calls, [&] { Tensor y = wait(fork(first, x)); });
    first.lane()->synchronize();

    // The op alone on this thread's stream: what the call adds to it is the actor's and the lane's.
    const Tensor factor = Tensor::full({1}, 2.0f).to(device);
    std::vector<double> op_us;
    for (int i = 0; i < calls; ++i) {
      const auto start = Clock::now();
      Tensor y = mul(x, factor);
      op_us.push_back(micros(Clock::now() - start));
      finish(device);
    }
    const double bare_op_us = median(op_us);

    // The same op as a lane's call on this thread, no actor: what the lane protocol adds to the op
    // (the arguments' checks, the stream made current, the completion event).
    std::unique_ptr<Lane> own_lane = Lane::make(device, "bench");
    std::vector<double> lane_us;
    for (int i = 0; i < calls; ++i) {
      const auto start = Clock::now();
      Tensor y = detail::run_on_lane<Tensor>(own_lane.get(), [&] { return mul(x, factor); }, std::make_tuple(x));
      lane_us.push_back(micros(Clock::now() - start));
      own_lane->synchronize();
    }
    const double lane_call_us = median(lane_us);

    // Calls in flight together: what each costs once the caller does not wait for the one before
    // (the actor's own work per call: take the message, queue the kernel, answer).
    std::vector<Future<Tensor>> pending;
    pending.reserve(calls);
    const auto burst_start = Clock::now();
    for (int i = 0; i < calls; ++i) pending.push_back(fork(first, x));
    const double fork_us = micros(Clock::now() - burst_start) / calls;
    for (auto& f : pending) wait(f);
    const double pipelined_us = micros(Clock::now() - burst_start) / calls;
    pending.clear();
    first.lane()->synchronize();

    // A hand-off: first's result to second, nothing read on the host.
    reset_sync_counts();
    const int handoffs = 100;
    Tensor z;
    for (int i = 0; i < handoffs; ++i) z = wait(fork(second, wait(fork(first, x))));
    const uint64_t syncs = sync_count();
    for (float value : z.to_vector<float>())  // the one wait, after the count
      if (value != 1.0f && !stubbed)  // a stubbed runtime runs no kernels
        throw ValueError("lane_bench: the hand-off computed " + std::to_string(value) + ", not 1");

    if (json) {
      print_json_line(nlohmann::ordered_json{{"device", device.str()},
                                             {"lane", device.is_cpu() ? "host" : "cuda stream"},
                                             {"enqueue_us", rounded(enqueue_us, 2)},
                                             {"to_module_us", rounded(median(to_module_us), 2)},
                                             {"in_module_us", rounded(median(in_module_us), 2)},
                                             {"back_us", rounded(median(back_us), 2)},
                                             {"fork_us", rounded(fork_us, 2)},
                                             {"op_us", rounded(bare_op_us, 2)},
                                             {"lane_call_us", rounded(lane_call_us, 2)},
                                             {"pipelined_us", rounded(pipelined_us, 2)},
                                             {"handoffs", handoffs},
                                             {"handoff_syncs", syncs},
                                             {"cuda_runtime", stubbed ? "stub (host part only)" : "real"},
                                             {"per_call", per_call}});
    } else {
      std::printf("%s lanes: a call and its wait cost the caller %.2f us (median of %d: %.2f us to the module, %.2f in "
                  "its op, %.2f back; the op alone %.2f us, as a lane's call on this thread %.2f us); fork alone %.2f "
                  "us; %d calls in flight %.2f us each; %d hand-offs made %llu host syncs; per call%s: %s\n",
                  device.str().c_str(), enqueue_us, calls, median(to_module_us), median(in_module_us), median(back_us),
                  bare_op_us, lane_call_us, fork_us, calls, pipelined_us, handoffs, static_cast<unsigned long long>(syncs),
                  stubbed ? " (CUDA runtime stubbed: the host part only)" : "", per_call.dump().c_str());
    }
    return 0;
  });
}
