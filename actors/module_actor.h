#pragma once
// ModuleActor<M>: a stateful object (an LSTM with its weights, a model shard) living in its own
// actor. Calls to it are requests to its mailbox, run one at a time in the order they were forked.
//
//   ModuleActor<LSTM> cell("cell_f", input_size, hidden_size);   // M's constructor arguments follow the name
//   Future<Tensor> f = fork(cell, x);                             // runs (*cell)(x) in the actor
//   Tensor y = wait(f);
//   cell->load(weights);                                          // direct access, e.g. for set-up
#include <memory>
#include <string>
#include <utility>

#include "actors/module_queue.h"

namespace troupe {

namespace detail {
// Spawns the module's actor; it runs the queue's calls as their requests arrive.
std::shared_ptr<ModuleQueue> spawn_module_actor(std::string name);
}  // namespace detail

template <class M>
class ModuleActor {
 public:
  template <class... Args>
  explicit ModuleActor(std::string name, Args&&... args)
      : object_(std::make_shared<M>(std::forward<Args>(args)...)),
        queue_(detail::spawn_module_actor(std::move(name))) {}

  M& operator*() { return *object_; }
  M* operator->() { return object_.get(); }
  const std::string& name() const { return queue_->name(); }

  const std::shared_ptr<M>& shared_object() const { return object_; }
  const std::shared_ptr<ModuleQueue>& queue() const { return queue_; }

 private:
  std::shared_ptr<M> object_;
  std::shared_ptr<ModuleQueue> queue_;
};

}  // namespace troupe
