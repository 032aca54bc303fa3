// The cuda DeviceBackend: stream-ordered caching allocation, copies, streams and the current stream.
//
// Memory comes from each device's stream-ordered pool (cudaMallocAsync/cudaFreeAsync), told to keep
// what it has: a freed block is reused without a trip to the driver, and only once the stream that
// freed it has reached the free. A block is freed on the stream that allocated it; when another
// thread's current stream drops it, that stream's work so far is made to precede the free (an
// event), so the block outlives both its producer's and its last consumer's kernels.
#include <cstdint>
#include <cstdio>
#include <atomic>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "devices/backend.h"
#include "devices/sync.h"
#include "devices/cuda/cuda_util.h"
#include "devices/cuda/shared_staging.h"
#include "devices/cpu/parallel_ranges.h"
#include "devices/cuda/kernel_errors.h"
#include "devices/cuda/out_of_memory.h"
#include "devices/tensor.h"

namespace troupe::cuda {

void check(cudaError_t err, const char* call, int device) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clears a non-sticky error so later calls are not blamed for it
  throw DeviceError("cuda:" + std::to_string(device) + ": " + call + ": " + cudaGetErrorString(err));
}

void check_kernel_dtype(const Tensor& t, DType expected) {
  if (t.dtype() != expected)
    throw DTypeError(std::string("cuda kernel: expected a ") + name(expected) + " tensor, got " + t.meta().str());
}

DeviceGuard::DeviceGuard(int device) : device_(device) {
  check(cudaGetDevice(&previous_), "cudaGetDevice", device);
  if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice", device);
}

DeviceGuard::~DeviceGuard() {
  if (previous_ != device_) cudaSetDevice(previous_);
}

bool stream_idle(cudaStream_t stream) {
  const cudaError_t err = cudaStreamQuery(stream);
  if (err == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

namespace {

// Asked of the runtime once: every current_stream() checks its device, on the path of each launch.
int known_device_count() {
  static const int count = device_count();
  return count;
}

void check_device(int device, const char* what) {
  const int count = known_device_count();
  if (device < 0 || device >= count || device >= kMaxDevices)
    throw DeviceError(std::string(what) + ": no device cuda:" + std::to_string(device) + " (this machine has " +
                      std::to_string(count) + " CUDA device(s))");
}

// Which stream each live block was allocated on; nullptr once that stream is gone. Small blocks
// freed in their stream's order are kept for that stream's next allocations of the same size:
// reuse within one stream is ordered by the stream itself, and a small op then makes no driver
// call for its output (cudaMallocAsync and cudaFreeAsync cost about 1.3 us a pair on the H100 VM).
struct KeptBlocks {
  int device = 0;
  size_t bytes = 0;
  std::unordered_map<size_t, std::vector<void*>> by_size;
};
struct Blocks {
  std::mutex mutex;
  std::unordered_map<void*, cudaStream_t> stream_of;
  std::unordered_map<cudaStream_t, KeptBlocks> kept;
};
constexpr size_t kKeptBlockMax = size_t(1) << 20;      // bytes of the largest block kept
constexpr size_t kPipelinedUploadMin = size_t(8) << 20;  // pageable uploads from here go through pinned pieces
constexpr size_t kUploadPiece = size_t(4) << 20;
constexpr size_t kKeptPerStream = size_t(64) << 20;    // bytes kept per stream at most

Blocks& blocks() {
  static Blocks* b = new Blocks;  // never destroyed: storages may be freed during static teardown
  return *b;
}

}  // namespace

// One default stream per device, made on first use and never destroyed.
cudaStream_t default_stream(int device) {
  static std::once_flag made[kMaxDevices];
  static Stream* streams[kMaxDevices] = {};
  check_device(device, "default_stream");
  std::call_once(made[device], [&] { streams[device] = new Stream(device); });
  return streams[device]->handle();
}

namespace {

thread_local const Stream* thread_streams[kMaxDevices] = {};
// Whether a thread without a stream of its own has queued work on the device's default stream: until
// then a free has no reads there to wait for.
std::atomic<bool> default_stream_used[kMaxDevices] = {};

// Pinned host blocks for staging, kept for reuse by size (cudaHostAlloc costs milliseconds); at most
// kPinnedKeep bytes are kept, the rest freed when returned. A block that an upload still reads (a
// host-to-device copy queued from it and not done: the DMA reads pinned memory after the call
// returns) is not handed out again before that copy is done.
class PinnedBlocks {
 public:
  void* take(size_t nbytes, int device) {
    if (nbytes == 0) return nullptr;
    {
      std::lock_guard lock(mutex_);
      for (auto [it, end] = free_.equal_range(nbytes); it != end; ++it) {
        const Block& block = blocks_.at(it->second);
        if (block.read) {
          const cudaError_t err = cudaEventQuery(block.read);
          if (not_ready(err)) continue;
          check(err, "cudaEventQuery (staging block)", device);
        }
        char* p = it->second;
        free_.erase(it);
        kept_ -= nbytes;
        return p;
      }
    }
    void* p = nullptr;
    check(cudaHostAlloc(&p, nbytes, cudaHostAllocPortable), "cudaHostAlloc (staging)", device);
    std::lock_guard lock(mutex_);
    blocks_.emplace(static_cast<char*>(p), Block{nbytes, nullptr});
    return p;
  }

  void give_back(void* p, size_t nbytes) {
    if (!p) return;
    Block block;
    {
      std::lock_guard lock(mutex_);
      if (kept_ + nbytes <= kPinnedKeep) {
        free_.emplace(nbytes, static_cast<char*>(p));
        kept_ += nbytes;
        return;
      }
      block = blocks_.at(static_cast<char*>(p));
      blocks_.erase(static_cast<char*>(p));
    }
    if (block.read) {
      cudaEventSynchronize(block.read);  // rare: only past kPinnedKeep, and only while an upload reads it
      cudaEventDestroy(block.read);
    }
    cudaFreeHost(p);
  }

  // Whether p lies in a pinned block of ours.
  bool holds(const void* p) {
    std::lock_guard lock(mutex_);
    auto it = blocks_.upper_bound(static_cast<char*>(const_cast<void*>(p)));
    if (it == blocks_.begin()) return false;
    --it;
    return static_cast<const char*>(p) < it->first + it->second.size;
  }

  // An upload from src was queued on stream: a staging block holding src is busy until it is done.
  void note_read(const void* src, cudaStream_t stream, int device) {
    std::lock_guard lock(mutex_);
    auto it = blocks_.upper_bound(static_cast<char*>(const_cast<void*>(src)));
    if (it == blocks_.begin()) return;
    --it;
    if (static_cast<const char*>(src) >= it->first + it->second.size) return;
    if (!it->second.read)
      check(cudaEventCreateWithFlags(&it->second.read, cudaEventDisableTiming), "cudaEventCreateWithFlags", device);
    check(cudaEventRecord(it->second.read, stream), "cudaEventRecord", device);
  }

 private:
  struct Block {
    size_t size = 0;
    cudaEvent_t read = nullptr;  // after the last upload queued from it
  };
  static constexpr size_t kPinnedKeep = size_t(1) << 30;
  std::mutex mutex_;
  std::map<char*, Block> blocks_;  // every block made and not freed, by address
  std::multimap<size_t, char*> free_;
  size_t kept_ = 0;
};

PinnedBlocks& pinned_blocks() {
  static PinnedBlocks* blocks = new PinnedBlocks;  // never destroyed: storages may go during static teardown
  return *blocks;
}

// Arena blocks keep the pool's 256-byte alignment; kept blocks are sized by it too.
size_t round_up(size_t nbytes) { return (nbytes + 255) / 256 * 256; }

// A kept block of `size` bytes for stream, or nullptr. With blocks().mutex held.
void* take_kept(cudaStream_t stream, size_t size) {
  auto s = blocks().kept.find(stream);
  if (s == blocks().kept.end()) return nullptr;
  auto b = s->second.by_size.find(size);
  if (b == s->second.by_size.end() || b->second.empty()) return nullptr;
  void* p = b->second.back();
  b->second.pop_back();
  s->second.bytes -= size;
  return p;
}

void* from_arena(AllocationArena& arena, size_t nbytes, int index) {
  const size_t need = round_up(nbytes);
  if (arena.used + need > arena.size)
    throw DeviceError("cuda:" + std::to_string(index) + ": a captured graph's arena of " + std::to_string(arena.size) +
                      " bytes cannot hold " + std::to_string(need) + " more (the captured code allocated more than "
                      "its measured run: it must queue the same work each time)");
  void* p = arena.base + arena.used;
  arena.used += need;
  return p;
}

struct Arenas {
  std::mutex mutex;
  std::vector<const AllocationArena*> live;
  std::atomic<int> count{0};
};

Arenas& arenas() {
  static Arenas* a = new Arenas;
  return *a;
}

class CudaBackend final : public DeviceBackend {
 public:
  explicit CudaBackend(int count) : count_(count) {}

  void* allocate(size_t nbytes, int index) override {
    if (nbytes == 0) return nullptr;
    ThreadAllocation& mode = thread_allocation();
    if (mode.arena) return from_arena(*mode.arena, nbytes, index);
    if (mode.meter) *mode.meter += round_up(nbytes);
    DeviceGuard on(index);
    keep_pool_memory(index);
    const cudaStream_t stream = current_stream(index);
    if (round_up(nbytes) <= kKeptBlockMax) {
      nbytes = round_up(nbytes);
      std::lock_guard lock(blocks().mutex);
      if (void* kept = take_kept(stream, nbytes)) {
        blocks().stream_of[kept] = stream;
        return kept;
      }
    }
    auto try_allocate = [&]() -> void* {
      void* p = nullptr;
      const cudaError_t err = cudaMallocAsync(&p, nbytes, stream);
      if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        return nullptr;
      }
      check(err, "cudaMallocAsync", index);
      return p;
    };
    auto free_memory = [index] {
      size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      return std::to_string(free >> 20) + " MiB free of " + std::to_string(total >> 20) + " MiB";
    };
    void* p = allocate_or_release_cached(index, nbytes, try_allocate, [&] { return release_cached(index, nbytes); },
                                         free_memory);
    std::lock_guard lock(blocks().mutex);
    blocks().stream_of[p] = stream;
    return p;
  }

  // Runs from ~Storage, so it reports failures instead of throwing them.
  void deallocate(void* ptr, size_t nbytes, int index) override {
    if (!ptr || in_arena(ptr)) return;  // an arena's blocks go with the arena
    if (std::vector<DeferredFree>* deferred = thread_allocation().deferred) {
      deferred->push_back({.ptr = ptr, .nbytes = nbytes, .device = index, .readers = {}});
      return;
    }
    cudaStream_t owner = nullptr;
    {
      std::lock_guard lock(blocks().mutex);
      auto it = blocks().stream_of.find(ptr);
      // Not the pool's: a block of an arena already freed (its tensor outlived the captured graph).
      if (it == blocks().stream_of.end()) return;
      owner = it->second;
      blocks().stream_of.erase(it);
    }
    cudaStream_t here = nullptr;
    try {
      here = current_stream(index);
    } catch (const DeviceError&) {
      return;  // the runtime is already gone (process exit): the driver frees everything
    }
    int previous = -1;
    cudaGetDevice(&previous);
    if (previous != index) cudaSetDevice(index);
    cudaError_t err = cudaSuccess;
    // The block goes back in its own stream's order (this thread's once that stream is gone). Work
    // queued so far on another stream may still read it, so the freeing stream waits for that first
    // unless the other stream has nothing pending: this thread's stream, and the device's default
    // stream, where threads without a lane queue reads that record no use (Storage::add_use).
    const cudaStream_t freeing = owner ? owner : here;
    auto after_reads_on = [&](cudaStream_t reader) {
      if (err != cudaSuccess || reader == freeing || stream_idle(reader)) return;
      cudaEvent_t dropped;
      err = cudaEventCreateWithFlags(&dropped, cudaEventDisableTiming);
      if (err == cudaSuccess) err = cudaEventRecord(dropped, reader);
      if (err == cudaSuccess) err = cudaStreamWaitEvent(freeing, dropped, 0);
      if (err == cudaSuccess) err = cudaEventDestroy(dropped);
    };
    after_reads_on(here);
    if (default_stream_used[index].load(std::memory_order_relaxed)) {
      const cudaStream_t shared = default_stream(index);
      if (shared != here) after_reads_on(shared);
    }
    bool kept = false;
    const size_t size = round_up(nbytes);
    if (err == cudaSuccess && owner && size <= kKeptBlockMax) {
      std::lock_guard lock(blocks().mutex);
      KeptBlocks& keep = blocks().kept[owner];
      if (keep.bytes + size <= kKeptPerStream) {
        keep.device = index;
        keep.by_size[size].push_back(ptr);
        keep.bytes += size;
        kept = true;
      }
    }
    if (err == cudaSuccess && !kept) err = cudaFreeAsync(ptr, freeing);
    if (previous != index) cudaSetDevice(previous);
    // At process exit the runtime may already be gone; the driver frees everything anyway.
    if (err != cudaSuccess && err != cudaErrorCudartUnloading)
      std::fprintf(stderr, "troupe: cuda:%d: freeing %p: %s\n", index, ptr, cudaGetErrorString(err));
  }

  // The block's own stream waits for each reader's event, then frees it in stream order. Runs from
  // ~Storage, so it reports failures instead of throwing them.
  void deallocate_after(void* ptr, size_t nbytes, int index, const std::vector<Event>& events) override {
    if (std::vector<DeferredFree>* deferred = thread_allocation().deferred; deferred && !in_arena(ptr)) {
      deferred->push_back({.ptr = ptr, .nbytes = nbytes, .device = index, .readers = events});
      return;
    }
    try {
      cudaStream_t owner = nullptr;
      {
        std::lock_guard lock(blocks().mutex);
        auto it = blocks().stream_of.find(ptr);
        if (it != blocks().stream_of.end()) owner = it->second;
      }
      for (const Event& e : events) stream_wait_event(owner ? owner : current_stream(index), e, index);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "troupe: cuda:%d: ordering the free of %p after its readers: %s\n", index, ptr, e.what());
    }
    deallocate(ptr, nbytes, index);
  }

  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) override {
    if (nbytes == 0) return;
    const int index = dst_device.is_cuda() ? dst_device.index : src_device.index;
    DeviceGuard on(index);
    const cudaStream_t stream = current_stream(index);
    if (src_device.is_cpu() && dst_device.is_cuda() && nbytes >= kPipelinedUploadMin && !pinned_blocks().holds(src))
      return upload_pageable(dst, src, nbytes, stream, index);
    // Pageable host memory: a host-to-device copy returns once the source is staged, a
    // device-to-host copy once it has landed; the explicit wait keeps the latter true for pinned memory.
    if (dst_device.is_cpu()) note_sync(src_device, "copy to host");  // before anything is queued: it may refuse
    check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync", index);
    if (src_device.is_cpu()) pinned_blocks().note_read(src, stream, index);
    if (dst_device.is_cpu()) {
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", index);
      raise_pending_kernel_error(index);  // what the kernels before the copy found (kernel_errors.h)
    }
  }

  bool copy_elements(const Tensor& src, Tensor& dst) override { return copy_elements_on_device(src, dst); }

  // A large upload from pageable memory (a received frame, say) through two pinned pieces in turn:
  // the intra-op threads fill one while the DMA drains the other. The driver's own path for
  // pageable memory moves about 7.9 GB/s on the H100 VM against 54 GB/s from pinned memory.
  // Returns once the source has been read, like a pageable copy.
  void upload_pageable(void* dst, const void* src, size_t nbytes, cudaStream_t stream, int index) {
    void* pieces[2] = {pinned_blocks().take(kUploadPiece, index), pinned_blocks().take(kUploadPiece, index)};
    Event drained[2];
    try {
      for (size_t at = 0, k = 0; at < nbytes; at += kUploadPiece, ++k) {
        const size_t n = std::min(kUploadPiece, nbytes - at);
        auto* piece = static_cast<char*>(pieces[k % 2]);
        if (drained[k % 2].valid()) drained[k % 2].state()->wait();  // the DMA two pieces back read it
        const char* from = static_cast<const char*>(src) + at;
        parallel_ranges(static_cast<int64_t>(n), int64_t(1) << 19, 4096,
                        [&](int64_t begin, int64_t end) { std::memcpy(piece + begin, from + begin, end - begin); });
        check(cudaMemcpyAsync(static_cast<char*>(dst) + at, piece, n, cudaMemcpyHostToDevice, stream),
              "cudaMemcpyAsync", index);
        drained[k % 2] = record_event(stream, index);
      }
    } catch (...) {
      for (void* p : pieces) release_after_reads(p, stream, index);
      throw;
    }
    for (void* p : pieces) release_after_reads(p, stream, index);
  }

  // A staging piece back to the pool, busy until the copies queued on stream from it are done.
  static void release_after_reads(void* piece, cudaStream_t stream, int index) {
    try {
      pinned_blocks().note_read(piece, stream, index);
    } catch (const DeviceError&) {
      cudaStreamSynchronize(stream);  // the event could not be made: make sure nothing still reads it
    }
    pinned_blocks().give_back(piece, kUploadPiece);
  }

  // A host tensor of contiguous's dtype and shape in a pinned block (back to the pool when dropped).
  static Tensor pinned_like(const Tensor& contiguous) {
    const size_t nbytes = contiguous.nbytes();
    void* pinned = pinned_blocks().take(nbytes, contiguous.device().index);
    auto storage = std::make_shared<Storage>(pinned, nbytes, Device::cpu(),
                                             [nbytes](void* p) { pinned_blocks().give_back(p, nbytes); });
    return Tensor(std::move(storage), contiguous.dtype(), contiguous.shape(), contiguous_strides(contiguous.shape()), 0);
  }

  // Device to host through pinned memory: one DMA at the link's full rate (a pageable copy goes
  // through the driver's own staging buffer), on the calling thread's stream, one counted wait.
  Tensor to_host(const Tensor& contiguous) override {
    const int index = contiguous.device().index;
    const size_t nbytes = contiguous.nbytes();
    Tensor host = pinned_like(contiguous);
    if (nbytes == 0) return host;
    void* pinned = host.storage()->data();
    DeviceGuard on(index);
    const cudaStream_t stream = current_stream(index);
    note_sync(contiguous.device(), "copy to host");
    check(cudaMemcpyAsync(pinned, contiguous.raw_data(), nbytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync",
          index);
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", index);
    raise_pending_kernel_error(index);
    return host;
  }

  // The same copy, queued in pieces with an event after each, and no wait. The block goes back to
  // the pool only once the copies are done (marked busy until then, like an upload's source).
  Tensor to_host_async(const Tensor& contiguous, uint64_t piece_bytes,
                       std::vector<std::pair<uint64_t, Event>>& pieces) override {
    const int index = contiguous.device().index;
    const size_t nbytes = contiguous.nbytes();
    Tensor host = pinned_like(contiguous);
    if (nbytes == 0) return host;
    void* pinned = host.storage()->data();
    DeviceGuard on(index);
    const cudaStream_t stream = current_stream(index);
    const auto* from = static_cast<const char*>(contiguous.raw_data());
    for (uint64_t at = 0; at < nbytes; at += piece_bytes) {
      const uint64_t n = std::min<uint64_t>(piece_bytes, nbytes - at);
      check(cudaMemcpyAsync(static_cast<char*>(pinned) + at, from + at, n, cudaMemcpyDeviceToHost, stream),
            "cudaMemcpyAsync", index);
      pieces.emplace_back(at + n, record_event(stream, index));
    }
    pinned_blocks().note_read(pinned, stream, index);
    // The source's bytes are not freed for reuse before the copy read them.
    contiguous.storage()->add_use(pieces.back().second);
    return host;
  }

  std::optional<std::vector<uint8_t>> stage_shared(const Tensor& contiguous, const std::string& channel) override {
    return cuda::stage_shared(contiguous, channel);
  }
  Tensor unstage_shared(std::span<const uint8_t> descriptor, Device device) override {
    return cuda::unstage_shared(descriptor, device);
  }

  int device_count() override { return count_; }

  std::string describe() override {
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    std::string s = std::to_string(count_) + " CUDA device(s):";
    for (int i = 0; i < count_; ++i) {
      cudaDeviceProp p{};
      if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
      s += " cuda:" + std::to_string(i) + " " + p.name + " (sm_" + std::to_string(p.major) +
           std::to_string(p.minor) + ", " + std::to_string(p.totalGlobalMem >> 30) + " GiB)";
    }
    return s + "; runtime " + std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) +
           ", driver " + std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
  }

 private:
  // The pool would otherwise hand memory back to the driver at every synchronisation.
  void keep_pool_memory(int index) {
    std::call_once(pool_configured_[index], [index] {
      cudaMemPool_t pool;
      check(cudaDeviceGetDefaultMemPool(&pool, index), "cudaDeviceGetDefaultMemPool", index);
      uint64_t keep_all = UINT64_MAX;
      check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all), "cudaMemPoolSetAttribute",
            index);
    });
  }

  // The device is full: every stream's kept blocks go back to the pool, and the pool's unused memory
  // to the driver once the device has done all work queued so far (a block freed on one stream is
  // then free for any, and cuBLAS's or staging's own cudaMalloc gets what the pool held). Returns
  // the bytes the pool gave back.
  size_t release_cached(int index, size_t asked) {
    {
      // Freed under the lock: a stream being destroyed takes it before it frees its own kept blocks.
      std::lock_guard lock(blocks().mutex);
      for (auto it = blocks().kept.begin(); it != blocks().kept.end();) {
        if (it->second.device != index) {
          ++it;
          continue;
        }
        for (auto& [size, list] : it->second.by_size)
          for (void* p : list) cudaFreeAsync(p, it->first);
        it = blocks().kept.erase(it);
      }
    }
    note_sync(Device::cuda(index), "allocation of " + std::to_string(asked) + " bytes, after out of memory");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (out of memory)", index);
    cudaMemPool_t pool;
    check(cudaDeviceGetDefaultMemPool(&pool, index), "cudaDeviceGetDefaultMemPool", index);
    uint64_t before = 0, after = 0;
    cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &before);
    check(cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo", index);
    cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &after);
    return before > after ? before - after : 0;  // another thread's allocation may have grown it meanwhile
  }

  int count_;
  std::once_flag pool_configured_[kMaxDevices];
};

// Registers the backend when the library loads, or records why there is none.
const bool registered = [] {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    set_cuda_unavailable_reason(std::string("no CUDA device: cudaGetDeviceCount: ") + cudaGetErrorString(err));
    return false;
  }
  if (count == 0) {
    set_cuda_unavailable_reason("no CUDA device: cudaGetDeviceCount found none");
    return false;
  }
  register_backend(DeviceType::cuda, new CudaBackend(count));  // never destroyed, like the cpu backend
  return true;
}();

}  // namespace

ThreadAllocation& thread_allocation() {
  thread_local ThreadAllocation mode;
  return mode;
}

void free_deferred(std::vector<DeferredFree>& frees) {
  DeviceBackend& cuda = backend(DeviceType::cuda);
  for (DeferredFree& f : frees) {
    if (f.readers.empty())
      cuda.deallocate(f.ptr, f.nbytes, f.device);
    else
      cuda.deallocate_after(f.ptr, f.nbytes, f.device, f.readers);
  }
  frees.clear();
}

bool in_arena(const void* p) {
  if (arenas().count.load(std::memory_order_acquire) == 0) return false;  // no capture alive: one load
  std::lock_guard lock(arenas().mutex);
  for (const AllocationArena* a : arenas().live)
    if (p >= a->base && p < a->base + a->size) return true;
  return false;
}

void add_arena(const AllocationArena* arena) {
  std::lock_guard lock(arenas().mutex);
  arenas().live.push_back(arena);
  arenas().count.fetch_add(1, std::memory_order_release);
}

void remove_arena(const AllocationArena* arena) {
  std::lock_guard lock(arenas().mutex);
  std::erase(arenas().live, arena);
  arenas().count.fetch_sub(1, std::memory_order_release);
}

namespace {

void host_callback(void* fn) {
  auto* callback = static_cast<std::function<void()>*>(fn);
  (*callback)();
  delete callback;
}

}  // namespace

Stream::Stream(int device) : device_(device) {
  check_device(device, "Stream");
  DeviceGuard on(device);
  check(cudaStreamCreateWithFlags(&handle_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", device);
}

Stream::~Stream() {
  cudaStreamSynchronize(handle_);
  std::vector<void*> kept;
  {
    // Blocks allocated here are now free of pending work: whoever drops them frees them.
    std::lock_guard lock(blocks().mutex);
    for (auto& [ptr, stream] : blocks().stream_of)
      if (stream == handle_) stream = nullptr;
    if (auto it = blocks().kept.find(handle_); it != blocks().kept.end()) {
      for (auto& [size, list] : it->second.by_size) kept.insert(kept.end(), list.begin(), list.end());
      blocks().kept.erase(it);
    }
  }
  for (void* p : kept) cudaFreeAsync(p, handle_);
  destroy_blas();
  if (dnn_) destroy_dnn_(dnn_);
  cudaStreamDestroy(handle_);
}

void Stream::synchronize() const {
  note_sync(Device::cuda(device_), "Stream::synchronize");
  check(cudaStreamSynchronize(handle_), "cudaStreamSynchronize", device_);
  raise_pending_kernel_error(device_);
}

bool Stream::done() const {
  const cudaError_t err = cudaStreamQuery(handle_);
  if (not_ready(err)) return false;
  check(err, "cudaStreamQuery", device_);
  return true;
}

void Stream::wait(cudaStream_t other) const {
  if (other == handle_) return;
  DeviceGuard on(device_);
  cudaEvent_t reached;
  check(cudaEventCreateWithFlags(&reached, cudaEventDisableTiming), "cudaEventCreateWithFlags", device_);
  check(cudaEventRecord(reached, other), "cudaEventRecord", device_);
  check(cudaStreamWaitEvent(handle_, reached, 0), "cudaStreamWaitEvent", device_);
  check(cudaEventDestroy(reached), "cudaEventDestroy", device_);  // released once the wait is satisfied
}

void Stream::then(std::function<void()> fn) const {
  auto* callback = new std::function<void()>(std::move(fn));
  const cudaError_t err = cudaLaunchHostFunc(handle_, host_callback, callback);
  if (err != cudaSuccess) delete callback;
  check(err, "cudaLaunchHostFunc", device_);
}

cudaStream_t current_stream(int device) {
  check_device(device, "current_stream");
  if (const Stream* s = thread_streams[device]) return s->handle();
  if (!default_stream_used[device].load(std::memory_order_relaxed))
    default_stream_used[device].store(true, std::memory_order_relaxed);
  return default_stream(device);
}

const Stream* current_stream_object(int device) {
  check_device(device, "current_stream_object");
  return thread_streams[device];
}

void synchronize(int device) {
  note_sync(Device::cuda(device), "cuda::synchronize");
  check(cudaStreamSynchronize(current_stream(device)), "cudaStreamSynchronize", device);
  raise_pending_kernel_error(device);
}

const Stream* swap_current_stream(int device, const Stream* stream) {
  check_device(device, "swap_current_stream");
  return std::exchange(thread_streams[device], stream);
}

StreamGuard::StreamGuard(const Stream& stream)
    : device_(stream.device()), previous_(swap_current_stream(stream.device(), &stream)) {}

StreamGuard::~StreamGuard() { thread_streams[device_] = previous_; }

}  // namespace troupe::cuda
