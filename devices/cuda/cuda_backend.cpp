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

namespace {
// The calling thread's CUDA device as Troupe last set it (-1: not asked yet), so that a guard costs
// no driver call once known. Troupe sets devices only through set_thread_device; code that calls
// cudaSetDevice itself must restore the device before Troupe's next call on that thread.
thread_local int thread_device = -1;

int thread_current_device(int asking) {
  if (thread_device < 0) check(cudaGetDevice(&thread_device), "cudaGetDevice", asking);
  return thread_device;
}

cudaError_t set_thread_device(int device) {
  const cudaError_t err = cudaSetDevice(device);
  thread_device = err == cudaSuccess ? device : -1;  // unknown after a failure: asked again next time
  return err;
}
}  // namespace

DeviceGuard::DeviceGuard(int device) : device_(device), previous_(thread_current_device(device)) {
  if (previous_ != device) check(set_thread_device(device), "cudaSetDevice", device);
}

DeviceGuard::~DeviceGuard() {
  if (previous_ != device_) set_thread_device(previous_);
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

constexpr size_t kKeptBlockMax = size_t(1) << 20;      // bytes of the largest block kept
constexpr size_t kPipelinedUploadMin = size_t(8) << 20;  // pageable uploads from here go through pinned pieces
constexpr size_t kUploadPiece = size_t(4) << 20;
constexpr size_t kKeptPerStream = size_t(64) << 20;    // bytes kept per stream at most

}  // namespace

// A stream's share of the pool: each block allocated on a stream carries its stream's StreamBlocks
// (the Storage keeps it: DeviceBackend::allocate's owner), so a free finds its stream without a
// global map, under this stream's lock only. Small blocks freed in their stream's order are kept for
// that stream's next allocations of the same size: reuse within one stream is ordered by the stream
// itself, and a small op then makes no driver call for its output (cudaMallocAsync and
// cudaFreeAsync cost about 1.3 us a pair on the H100 VM). It outlives its stream while its blocks
// do; once the stream is gone they are free of pending work, and whoever drops them frees them.
struct StreamBlocks {
  StreamBlocks(int device, cudaStream_t stream) : device(device), stream(stream) {}
  void add_block() { refs.fetch_add(1, std::memory_order_relaxed); }
  void release() {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  const int device;
  std::mutex mutex;     // this stream's allocations and frees
  cudaStream_t stream;  // nullptr once the stream is gone
  size_t kept_bytes = 0;
  std::unordered_map<size_t, std::vector<void*>> kept;  // by size
  std::atomic<size_t> refs{1};                          // its blocks alive, and the stream while alive
};

namespace {

// Every stream's share, for a device that ran out of memory (release_cached): touched as streams
// come and go, never per allocation.
struct AllStreamBlocks {
  std::mutex mutex;
  std::vector<StreamBlocks*> live;
};
AllStreamBlocks& all_stream_blocks() {
  static auto* all = new AllStreamBlocks;  // never destroyed: streams may go during static teardown
  return *all;
}

// One default stream per device, made on first use and never destroyed.
const Stream& default_stream_object(int device) {
  static std::once_flag made[kMaxDevices];
  static Stream* streams[kMaxDevices] = {};
  check_device(device, "default_stream");
  std::call_once(made[device], [&] { streams[device] = new Stream(device); });
  return *streams[device];
}

}  // namespace

cudaStream_t default_stream(int device) { return default_stream_object(device).handle(); }

namespace {

thread_local const Stream* thread_streams[kMaxDevices] = {};
// Whether a thread without a stream of its own has queued work on the device's default stream: until
// then a free has no reads there to wait for.
std::atomic<bool> default_stream_used[kMaxDevices] = {};
void note_default_stream_use(int device) {
  if (!default_stream_used[device].load(std::memory_order_relaxed))
    default_stream_used[device].store(true, std::memory_order_relaxed);
}

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

// A kept block of `size` bytes of the stream's, or nullptr. With its mutex held.
void* take_kept(StreamBlocks& blocks, size_t size) {
  auto b = blocks.kept.find(size);
  if (b == blocks.kept.end() || b->second.empty()) return nullptr;
  void* p = b->second.back();
  b->second.pop_back();
  blocks.kept_bytes -= size;
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

  void* allocate(size_t nbytes, int index, void** owner) override {
    *owner = nullptr;  // an arena's block: freed with the arena
    if (nbytes == 0) return nullptr;
    ThreadAllocation& mode = thread_allocation();
    if (mode.arena) return from_arena(*mode.arena, nbytes, index);
    if (mode.meter) *mode.meter += round_up(nbytes);
    DeviceGuard on(index);
    keep_pool_memory(index);
    const Stream* lane_stream = current_stream_object(index);
    const Stream& stream = lane_stream ? *lane_stream : default_stream_object(index);
    if (!lane_stream) note_default_stream_use(index);
    StreamBlocks& blocks = *stream.blocks();
    if (round_up(nbytes) <= kKeptBlockMax) {
      nbytes = round_up(nbytes);
      std::lock_guard lock(blocks.mutex);
      if (void* kept = take_kept(blocks, nbytes)) {
        blocks.add_block();
        *owner = &blocks;
        return kept;
      }
    }
    auto try_allocate = [&]() -> void* {
      void* p = nullptr;
      const cudaError_t err = cudaMallocAsync(&p, nbytes, stream.handle());
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
    blocks.add_block();
    *owner = &blocks;
    return p;
  }

  // Runs from ~Storage, so it reports failures instead of throwing them.
  void deallocate(void* ptr, size_t nbytes, int index, void* owner) override {
    free_block(ptr, nbytes, index, static_cast<StreamBlocks*>(owner), nullptr);
  }

  // The block's own stream waits for each reader's event (on another stream: a lane's mark is
  // recorded then), then frees it in stream order.
  void deallocate_after(void* ptr, size_t nbytes, int index, void* owner, const std::vector<Event>& events) override {
    free_block(ptr, nbytes, index, static_cast<StreamBlocks*>(owner), &events);
  }

  // Runs from ~Storage, so it reports failures instead of throwing them. owner: null for an arena's
  // block (freed with its arena; an arena already gone freed it then).
  void free_block(void* ptr, size_t nbytes, int index, StreamBlocks* owner, const std::vector<Event>* readers) {
    if (!ptr || !owner) return;
    if (std::vector<DeferredFree>* deferred = thread_allocation().deferred) {
      deferred->push_back(
          {.ptr = ptr, .nbytes = nbytes, .device = index, .readers = readers ? *readers : std::vector<Event>{}, .owner = owner});
      return;
    }
    cudaStream_t here = nullptr;
    try {
      here = current_stream(index);
    } catch (const DeviceError&) {
      owner->release();
      return;  // the runtime is already gone (process exit): the driver frees everything
    }
    int previous = thread_device;
    if (previous < 0 && cudaGetDevice(&previous) == cudaSuccess) thread_device = previous;
    if (previous != index) set_thread_device(index);
    cudaError_t err = cudaSuccess;
    // Looked up before the owner's lock: making the default stream takes the lock of all streams.
    const cudaStream_t shared =
        default_stream_used[index].load(std::memory_order_relaxed) ? default_stream(index) : nullptr;
    {
      // Held while the owner's stream is used: the stream is not destroyed meanwhile (~Stream).
      std::lock_guard lock(owner->mutex);
      // The block goes back in its own stream's order (this thread's once that stream is gone).
      const cudaStream_t freeing = owner->stream ? owner->stream : here;
      if (readers) {
        try {
          for (const Event& e : *readers) stream_wait_event(freeing, e, index);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "troupe: cuda:%d: ordering the free of %p after its readers: %s\n", index, ptr, e.what());
        }
      }
      // Work queued so far on another stream may still read it, so the freeing stream waits for that
      // first unless the other stream has nothing pending: this thread's stream, and the device's
      // default stream, where threads without a lane queue reads that record no use (Storage::add_use).
      auto after_reads_on = [&](cudaStream_t reader) {
        if (err != cudaSuccess || reader == freeing || stream_idle(reader)) return;
        cudaEvent_t dropped;
        err = cudaEventCreateWithFlags(&dropped, cudaEventDisableTiming);
        if (err == cudaSuccess) err = cudaEventRecord(dropped, reader);
        if (err == cudaSuccess) err = cudaStreamWaitEvent(freeing, dropped, 0);
        if (err == cudaSuccess) err = cudaEventDestroy(dropped);
      };
      after_reads_on(here);
      if (shared && shared != here) after_reads_on(shared);
      bool kept = false;
      const size_t size = round_up(nbytes);
      if (err == cudaSuccess && owner->stream && size <= kKeptBlockMax && owner->kept_bytes + size <= kKeptPerStream) {
        owner->kept[size].push_back(ptr);
        owner->kept_bytes += size;
        kept = true;
      }
      if (err == cudaSuccess && !kept) err = cudaFreeAsync(ptr, freeing);
    }
    owner->release();
    if (previous != index && previous >= 0) set_thread_device(previous);
    // At process exit the runtime may already be gone; the driver frees everything anyway.
    if (err != cudaSuccess && err != cudaErrorCudartUnloading)
      std::fprintf(stderr, "troupe: cuda:%d: freeing %p: %s\n", index, ptr, cudaGetErrorString(err));
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
      // Freed under the stream's lock: a stream being destroyed takes it before it goes.
      std::lock_guard all(all_stream_blocks().mutex);
      for (StreamBlocks* blocks : all_stream_blocks().live) {
        if (blocks->device != index) continue;
        std::lock_guard lock(blocks->mutex);
        if (!blocks->stream) continue;
        for (auto& [size, list] : blocks->kept)
          for (void* p : list) cudaFreeAsync(p, blocks->stream);
        blocks->kept.clear();
        blocks->kept_bytes = 0;
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
const bool backend_registered = [] {
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
      cuda.deallocate(f.ptr, f.nbytes, f.device, f.owner);
    else
      cuda.deallocate_after(f.ptr, f.nbytes, f.device, f.owner, f.readers);
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
  blocks_ = new StreamBlocks(device, handle_);
  std::lock_guard all(all_stream_blocks().mutex);
  all_stream_blocks().live.push_back(blocks_);
}

Stream::~Stream() {
  cudaStreamSynchronize(handle_);
  if (step_loops_) destroy_step_loops_(step_loops_);  // its buffers are blocks of this stream: freed first
  {
    std::lock_guard all(all_stream_blocks().mutex);
    std::erase(all_stream_blocks().live, blocks_);
  }
  std::vector<void*> kept;
  {
    // Blocks allocated here are now free of pending work: whoever drops them frees them.
    std::lock_guard lock(blocks_->mutex);
    blocks_->stream = nullptr;
    for (auto& [size, list] : blocks_->kept) kept.insert(kept.end(), list.begin(), list.end());
    blocks_->kept.clear();
  }
  blocks_->release();
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
  note_default_stream_use(device);
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
