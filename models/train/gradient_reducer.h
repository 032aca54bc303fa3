#pragma once
// Data-parallel gradient averaging the way PyTorch's DistributedDataParallel does it: parameters
// are grouped into buckets of about bucket_bytes in reverse order (backward produces the last
// layer's gradients first), and a bucket is all-reduced (average) asynchronously on the group's
// collective actor as soon as its last gradient has been accumulated, while backward goes on.
//
//   GradientReducer reducer(*world, model.parameters(), /*bucket_bytes=*/1 << 20);
//   opt.zero_grad();
//   nll_loss(model(x), y).backward();   // full buckets start reducing from inside backward
//   reducer.finish();                   // waits for all; every grad is now the mean over ranks
//   opt.step();
//
// Every rank must produce the same parameters' gradients in the same order (the same model);
// a parameter without a gradient in a pass is reduced as zeros when finish() is called. Each
// parameter may receive one gradient per pass (ValueError otherwise, naming it). The reducer hooks
// the parameters (AutogradMeta::grad_accumulated) until it is destroyed, so it must not outlive them.
//
// Parameters on a GPU: the collectives move host memory, so the gradients are staged through the
// host, as one contiguous flat buffer per step (a single bucket, whatever bucket_bytes says):
// flattened on the device once backward is done, copied to the host (one counted sync), all-reduced
// there, and copied back as the parameters' grads. Ranks sharing one GPU need nothing else.
#include <cstdint>
#include <vector>

#include "devices/tensor.h"
#include "net/process_group.h"
#include "net/work.h"

namespace troupe::models {

class GradientReducer {
 public:
  GradientReducer(net::ProcessGroup& group, std::vector<Tensor*> params, int64_t bucket_bytes = int64_t{1} << 20);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  void finish();
  int buckets() const { return static_cast<int>(buckets_.size()); }

  // The element count of each bucket a reducer over `params` makes: the shapes of its all_reduces.
  static std::vector<int64_t> bucket_counts(const std::vector<Tensor*>& params, int64_t bucket_bytes = int64_t{1} << 20);
  // One all_reduce (avg) of each of those shapes on `group`, a group about to be used: what a group
  // sets up per shape on its first call is paid now (net::QuorumOptions::warm_up runs it while the
  // rank trains on). Every rank of the group calls it with the same counts.
  static void warm_up(net::ProcessGroup& group, const std::vector<int64_t>& counts, DType dtype);
  // Buckets that began reducing during the last backward, before finish() was called.
  int launched_early() const { return launched_early_; }

 private:
  struct Bucket {
    std::vector<Tensor*> params;
    int pending = 0;  // gradients still to arrive in this pass
    Tensor flat;      // the bucket's gradients while they are reduced
    net::Work work;
    bool launched = false;
  };

  // Parameter indices by bucket, each bucket about bucket_bytes, in reverse order.
  static std::vector<std::vector<size_t>> bucketed(const std::vector<Tensor*>& params, int64_t bucket_bytes);
  void on_gradient(size_t param);
  void launch(Bucket& bucket);
  void reset();

  net::ProcessGroup& group_;
  std::vector<Tensor*> params_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // per parameter
  std::vector<bool> ready_;        // per parameter, this pass
  int launched_ = 0, launched_early_ = 0;
};

}  // namespace troupe::models
