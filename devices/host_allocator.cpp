#include "devices/host_allocator.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>

namespace troupe {

namespace {

constexpr size_t kMidBlock = size_t{64} << 10;
constexpr size_t kLargeBlock = size_t{1} << 20;
constexpr size_t kHugePage = size_t{2} << 20;

size_t large_size(size_t nbytes) { return (nbytes + kHugePage - 1) / kHugePage * kHugePage; }
size_t mid_size(size_t nbytes) { return (nbytes + kMidBlock - 1) / kMidBlock * kMidBlock; }

void* map_plain(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;
}

void* map_huge(size_t bytes) {
  // Over-map by one huge page so the block can start on a 2 MiB boundary (THP needs it).
  const size_t span = bytes + kHugePage;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (base + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > base) munmap(raw, aligned - base);
  const uintptr_t end = base + span, used_end = aligned + bytes;
  if (end > used_end) munmap(reinterpret_cast<void*>(used_end), end - used_end);
  madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

class LargeBlockCache {
 public:
  LargeBlockCache() {
    const char* env = std::getenv("TROUPE_HOST_CACHE_MB");
    limit_ = (env ? std::stoull(env) : 2048) << 20;
  }

  void* take(size_t bytes) {
    std::lock_guard lock(mutex_);
    auto it = free_.find(bytes);
    if (it == free_.end()) return nullptr;
    void* p = it->second;
    free_.erase(it);
    cached_ -= bytes;
    return p;
  }
  bool keep(void* p, size_t bytes) {
    std::lock_guard lock(mutex_);
    if (cached_ + bytes > limit_) return false;
    free_.emplace(bytes, p);
    cached_ += bytes;
    return true;
  }
  size_t cached() {
    std::lock_guard lock(mutex_);
    return cached_;
  }

 private:
  std::mutex mutex_;
  std::multimap<size_t, void*> free_;
  size_t cached_ = 0, limit_ = 0;
};

LargeBlockCache& cache() {
  static auto* c = new LargeBlockCache;  // never destroyed: tensors may die during static destruction
  return *c;
}

// Small blocks freed by a thread, kept for its next allocations of the same size. An aligned
// allocation of 1 KiB and up makes glibc consolidate its fast bins first, which the small frees of
// every op refill: without these, that cost a small op a fifth of its time.
class SmallBlockCache {
 public:
  static constexpr size_t kMaxBytes = size_t{64} << 10;
  static constexpr int kSlots = 32;

  ~SmallBlockCache() {
    for (int i = 0; i < used_; ++i) std::free(blocks_[i].ptr);
  }
  // The calling thread's, or nullptr once the thread is ending (tensors freed by its last
  // destructors, or by static ones after main's, go straight to free).
  static SmallBlockCache* of_this_thread();
  void* take(size_t bytes) {
    for (int i = used_ - 1; i >= 0; --i)
      if (blocks_[i].bytes == bytes) {
        void* p = blocks_[i].ptr;
        blocks_[i] = blocks_[--used_];
        return p;
      }
    return nullptr;
  }
  // Full, it gives the oldest block back: the newest is the likeliest to be asked for next.
  bool keep(void* p, size_t bytes) {
    if (bytes > kMaxBytes) return false;
    if (used_ == kSlots) {
      std::free(blocks_[0].ptr);
      std::memmove(blocks_, blocks_ + 1, sizeof(Block) * (kSlots - 1));
      --used_;
    }
    blocks_[used_++] = {bytes, p};
    return true;
  }

 private:
  struct Block {
    size_t bytes;
    void* ptr;
  };
  Block blocks_[kSlots];
  int used_ = 0;
};

// Trivial thread-locals, readable while the thread's other thread-locals are being destroyed.
thread_local SmallBlockCache* small_blocks = nullptr;
thread_local bool small_blocks_gone = false;

struct SmallBlocksOwner {
  ~SmallBlocksOwner() {
    delete small_blocks;
    small_blocks = nullptr;
    small_blocks_gone = true;
  }
};
thread_local SmallBlocksOwner small_blocks_owner;

SmallBlockCache* SmallBlockCache::of_this_thread() {
  if (!small_blocks && !small_blocks_gone) {
    (void)&small_blocks_owner;  // constructed now, so it frees the cache when the thread ends
    small_blocks = new SmallBlockCache;
  }
  return small_blocks;
}

size_t small_size(size_t nbytes) { return (std::max<size_t>(nbytes, 1) + 63) / 64 * 64; }

}  // namespace

void* host_allocate(size_t nbytes) {
  if (nbytes < kMidBlock) {
    const size_t bytes = small_size(nbytes);
    SmallBlockCache* kept = SmallBlockCache::of_this_thread();
    if (void* p = kept ? kept->take(bytes) : nullptr) return p;
    void* p = std::aligned_alloc(64, bytes);
    if (!p) throw std::bad_alloc();
    return p;
  }
  // From 64 KiB, blocks are mappings of their own kept for reuse (glibc maps such blocks afresh
  // and unmaps them on free until its threshold adapts, and trims its heap's top: each time their
  // pages fault in again). Below 1 MiB in 64 KiB steps, without huge pages.
  const bool large = nbytes >= kLargeBlock;
  const size_t bytes = large ? large_size(nbytes) : mid_size(nbytes);
  if (void* p = cache().take(bytes)) return p;
  return large ? map_huge(bytes) : map_plain(bytes);
}

void host_deallocate(void* ptr, size_t nbytes) {
  if (nbytes < kMidBlock) {
    SmallBlockCache* kept = SmallBlockCache::of_this_thread();
    if (!kept || !kept->keep(ptr, small_size(nbytes))) std::free(ptr);
    return;
  }
  const size_t bytes = nbytes >= kLargeBlock ? large_size(nbytes) : mid_size(nbytes);
  if (!cache().keep(ptr, bytes)) munmap(ptr, bytes);
}

size_t host_cached_bytes() { return cache().cached(); }

}  // namespace troupe
