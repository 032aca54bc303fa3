#include "net/collectives/buffers.h"

#include <cstdlib>
#include <mutex>
#include <vector>

namespace troupe::net::collectives {

namespace {

// A caller that keeps one result while the next call writes another needs two; more would only
// hold memory.
constexpr size_t kKeep = 2;
constexpr size_t kAlign = 64;

}  // namespace

struct Buffers::Idle {
  std::mutex mutex;
  std::vector<void*> blocks;

  ~Idle() {
    for (void* b : blocks) std::free(b);
  }
  void give_back(void* block) {
    {
      std::lock_guard lock(mutex);
      if (blocks.size() < kKeep) {
        blocks.push_back(block);
        return;
      }
    }
    std::free(block);
  }
};

Buffers::Buffers(int64_t count, DType dtype)
    : count_(count),
      dtype_(dtype),
      bytes_(static_cast<size_t>(count) * itemsize(dtype)),
      idle_(std::make_shared<Idle>()) {}

Buffers::~Buffers() = default;

Tensor Buffers::take() {
  if (bytes_ == 0) return Tensor::empty({count_}, dtype_);
  void* block = nullptr;
  {
    std::lock_guard lock(idle_->mutex);
    if (!idle_->blocks.empty()) {
      block = idle_->blocks.back();
      idle_->blocks.pop_back();
    }
  }
  if (!block) block = std::aligned_alloc(kAlign, (bytes_ + kAlign - 1) / kAlign * kAlign);
  if (!block) throw std::bad_alloc();
  // The block goes back to this object's idle list while it lives, to the heap after.
  auto storage = std::make_shared<Storage>(block, bytes_, Device::cpu(), [idle = std::weak_ptr<Idle>(idle_)](void* b) {
    if (auto alive = idle.lock()) alive->give_back(b);
    else std::free(b);
  });
  return Tensor(std::move(storage), dtype_, {count_}, contiguous_strides({count_}), 0);
}

size_t Buffers::idle() const {
  std::lock_guard lock(idle_->mutex);
  return idle_->blocks.size();
}

}  // namespace troupe::net::collectives
