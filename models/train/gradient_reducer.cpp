#include "models/train/gradient_reducer.h"

#include <limits>
#include <string>

#include "devices/autograd/node.h"
#include "devices/error.h"
#include "models/nn/optimizer.h"
#include "net/collectives.h"

namespace troupe::models {

GradientReducer::GradientReducer(net::ProcessGroup& group, std::vector<Tensor*> params, int64_t bucket_bytes)
    : group_(group), params_(std::move(params)), bucket_of_(params_.size()), ready_(params_.size()) {
  if (params_.empty()) throw ValueError("GradientReducer: no parameters");
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = *params_[i];
    if (!p.requires_grad() || p.autograd_meta()->grad_fn)
      throw ValueError("GradientReducer: parameter " + std::to_string(i) + " " + p.meta().str() +
                       " is not a leaf that requires grad");
    if (p.dtype() != params_[0]->dtype())
      throw DTypeError("GradientReducer: parameters of mixed dtypes (" + params_[0]->meta().str() + ", " +
                       p.meta().str() + ")");
  }
  for (const std::vector<size_t>& members : bucketed(params_, bucket_bytes)) {
    buckets_.emplace_back();
    for (size_t i : members) {
      buckets_.back().params.push_back(params_[i]);
      bucket_of_[i] = buckets_.size() - 1;
    }
  }
  reset();
  for (size_t i = 0; i < params_.size(); ++i) params_[i]->autograd_meta()->grad_accumulated = [this, i] { on_gradient(i); };
}

std::vector<std::vector<size_t>> GradientReducer::bucketed(const std::vector<Tensor*>& params, int64_t bucket_bytes) {
  if (bucket_bytes <= 0) throw ValueError("GradientReducer: bucket_bytes must be positive, got " + std::to_string(bucket_bytes));
  std::vector<std::vector<size_t>> buckets;
  if (params.empty()) return buckets;
  // Gradients on a device go through the host in one piece per step (the header says why).
  if (!params[0]->device().is_cpu()) bucket_bytes = std::numeric_limits<int64_t>::max();
  int64_t filled = bucket_bytes;  // forces a first bucket
  for (size_t i = params.size(); i-- > 0;) {
    if (filled >= bucket_bytes) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(i);
    filled += static_cast<int64_t>(params[i]->nbytes());
  }
  return buckets;
}

std::vector<int64_t> GradientReducer::bucket_counts(const std::vector<Tensor*>& params, int64_t bucket_bytes) {
  std::vector<int64_t> counts;
  for (const std::vector<size_t>& members : bucketed(params, bucket_bytes)) {
    int64_t count = 0;
    for (size_t i : members) count += params[i]->numel();
    counts.push_back(count);
  }
  return counts;
}

void GradientReducer::warm_up(net::ProcessGroup& group, const std::vector<int64_t>& counts, DType dtype) {
  for (int64_t count : counts) {
    Tensor zeros = Tensor::zeros({count}, dtype);
    net::all_reduce_async(group, zeros, net::ReduceOp::avg).wait();  // the path launch() takes
  }
}

GradientReducer::~GradientReducer() {
  for (Tensor* p : params_) p->autograd_meta()->grad_accumulated = nullptr;
  // The collective actor writes into the buckets' tensors until their reductions end.
  for (Bucket& b : buckets_) {
    if (!b.launched) continue;
    try {
      b.work.wait();
    } catch (const std::exception&) {  // the error was (or will never be) reported by finish()
    }
  }
}

void GradientReducer::reset() {
  for (Bucket& b : buckets_) {
    b.pending = static_cast<int>(b.params.size());
    b.launched = false;
    b.work = net::Work();
  }
  ready_.assign(params_.size(), false);
  launched_ = 0;
}

void GradientReducer::on_gradient(size_t param) {
  if (ready_[param])
    throw ValueError("GradientReducer: parameter " + std::to_string(param) + " " + params_[param]->meta().str() +
                     " received a second gradient in one backward pass (a parameter used twice, or backward "
                     "called again before finish())");
  ready_[param] = true;
  Bucket& bucket = buckets_[bucket_of_[param]];
  if (--bucket.pending == 0) launch(bucket);
}

void GradientReducer::launch(Bucket& bucket) {
  // A copy: backward may go on accumulating elsewhere. Device gradients are staged on the host,
  // where the collectives work: one device-to-host copy of the whole flat buffer.
  bucket.flat = flatten_grads(bucket.params).to(Device::cpu());
  bucket.work = net::all_reduce_async(group_, bucket.flat, net::ReduceOp::avg);
  bucket.launched = true;
  ++launched_;
}

void GradientReducer::finish() {
  launched_early_ = launched_;
  // Buckets with a parameter that got no gradient go now, in bucket order on every rank.
  for (Bucket& b : buckets_)
    if (!b.launched) launch(b);
  for (Bucket& b : buckets_) {
    b.work.wait();
    b.launched = false;
    assign_flat_grads(b.params, b.flat.to(b.params[0]->device()));  // back to the device, one copy
  }
  reset();
}

}  // namespace troupe::models
