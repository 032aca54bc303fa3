#pragma once
// CapturedPlan: an executor's invocations as one CUDA graph (ExecutorOptions::cuda_graph). Internal
// to the executor.
//
// A plan whose nodes are all ops and calls on one CUDA device can run without its actors: the
// nodes in topological order on the caller's thread, on one lane. The first invocation runs so,
// measuring what it allocates, and is then captured (CapturedWork); later invocations with the
// same input dtypes and shapes copy their inputs into the captured ones and replay the graph with
// one launch, and their outputs are copied out of the graph's arena. Other shapes return nothing:
// the executor's actors run them.
#include <memory>
#include <optional>
#include <vector>

#include "dataflow/plan.h"
#include "devices/captured_work.h"

namespace troupe::detail {

class CapturedPlan {
 public:
  // The constants already placed per node input slot, as the executor's node actors see them.
  using PlacedConstants = std::vector<std::vector<std::optional<Tensor>>>;

  // ValueError naming a node that is not an op or call on one CUDA device; DeviceError without a GPU.
  CapturedPlan(const Plan& plan, const PlacedConstants& constants);
  ~CapturedPlan();

  // The graph's outputs for these inputs, or nothing when their dtypes and shapes are not the
  // captured ones (the first call's are captured).
  std::optional<std::vector<Value>> run(const std::vector<Value>& inputs);
  bool captured() const { return work_ != nullptr; }

 private:
  std::vector<Value> run_in_order(const std::vector<Value>& inputs) const;

  const Plan& plan_;
  const PlacedConstants& constants_;
  Device device_;
  std::unique_ptr<Lane> lane_;
  std::vector<TensorMeta> metas_;      // the captured inputs'
  std::vector<Tensor> static_inputs_;  // their bytes, rewritten before each replay
  std::vector<Value> static_outputs_;  // in the arena, rewritten by each replay
  std::unique_ptr<CapturedWork> work_;  // last: goes before the lane and the tensors it uses
};

}  // namespace troupe::detail
