#pragma once
// ModuleActor<M>: a stateful object (an LSTM with its weights, a model shard) living in its own
// actor. Calls to it are requests to its mailbox, run one at a time in the order they were forked.
//
//   ModuleActor<LSTM> cell("cell_f", input_size, hidden_size);   // M's constructor arguments follow the name
//   Future<Tensor> f = fork(cell, x);                             // runs (*cell)(x) in the actor
//   Tensor y = wait(f);
//   cell->load(weights);                                          // direct access, e.g. for set-up
//
// On a GPU the actor owns a lane (devices/lane.h): its stream, cuBLAS handle and workspace. Its
// weights move there once, at construction (M::to(Device), where M has one); each call queues its
// kernels on the actor's stream and its Future completes once they are queued, carrying the event
// after them (Future::event()). A call of another GPU actor that takes the result waits for that
// event on the device; only reading values on the host waits (and is counted: devices/sync.h).
//
//   ModuleActor<LSTM> gpu_cell(ActorOptions{.name = "cell", .device = Device::cuda(0)}, 1024, 1024);
//   Future<Tensor> h = fork(gpu_cell, x);                         // returns once queued
//   Tensor y = wait(h);                                           // no host wait: y is on cuda:0
//   float first = y.to_vector<float>()[0];                        // the host waits here
#include <memory>
#include <string>
#include <utility>

#include "actors/module_queue.h"
#include "devices/lane.h"

namespace troupe {

struct ActorOptions {
  std::string name;
  Device device = Device::cpu();  // cuda:N: the actor owns a CUDA lane and its state lives there
  bool host_lane = false;         // on cpu: the actor still owns a host lane (Lane::current(cpu) in its calls)
};

namespace detail {
// Spawns the module's actor; it runs the queue's calls as their requests arrive. counted: its
// calls count in the actor metrics (false for a hosted remote actor's executor, which counts
// each remote call itself rather than the batches it runs).
std::shared_ptr<ModuleQueue> spawn_module_actor(std::string name, bool counted = true);
}  // namespace detail

template <class M>
class ModuleActor {
 public:
  template <class... Args>
  explicit ModuleActor(std::string name, Args&&... args)
      : object_(std::make_shared<M>(std::forward<Args>(args)...)),
        queue_(detail::spawn_module_actor(std::move(name))) {}

  template <class... Args>
  explicit ModuleActor(ActorOptions options, Args&&... args)
      : object_(std::make_shared<M>(std::forward<Args>(args)...)), queue_(detail::spawn_module_actor(options.name)) {
    if (options.device.is_cpu() && !options.host_lane) return;
    lane_ = Lane::make(options.device, options.name);
    if constexpr (requires(M& m) { m.to(Device::cpu()); })
      if (!options.device.is_cpu()) object_->to(options.device);  // the weights are uploaded once, here
  }

  M& operator*() { return *object_; }
  M* operator->() { return object_.get(); }
  const std::string& name() const { return queue_->name(); }

  const std::shared_ptr<M>& shared_object() const { return object_; }
  const std::shared_ptr<ModuleQueue>& queue() const { return queue_; }
  Lane* lane() const { return lane_.get(); }  // nullptr for a plain CPU actor
  const std::shared_ptr<Lane>& shared_lane() const { return lane_; }

 private:
  std::shared_ptr<M> object_;
  std::shared_ptr<Lane> lane_;  // before queue_: the actor stops before its lane goes
  std::shared_ptr<ModuleQueue> queue_;
};

}  // namespace troupe
