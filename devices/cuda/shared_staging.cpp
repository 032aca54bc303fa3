#include "devices/cuda/shared_staging.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "devices/cuda/cuda_util.h"
#include "devices/sync.h"

namespace troupe::cuda {
namespace {

constexpr uint32_t kSegmentMagic = 0x47545354;  // "TSTG"
constexpr uint32_t kDescriptorMagic = 0x44545354;
constexpr size_t kHeaderBytes = 8192;          // the segment's first bytes; host-staged data follows them
constexpr size_t kMinChunk = size_t(1) << 20;  // smaller chunks cost more in events than they overlap
enum Where : uint32_t { in_host_memory = 1, in_device_memory = 2 };

// At the start of every segment, shared by the two processes.
struct SegmentHeader {
  uint32_t magic;
  uint32_t where;          // in_host_memory: the bytes follow this header; in_device_memory: in `buffer`
  uint64_t capacity;       // bytes a staged tensor may have
  int32_t buffer_device;   // in_device_memory: the GPU holding `buffer`
  cudaIpcMemHandle_t buffer;
  cudaIpcEventHandle_t chunk_events[kMaxStagedChunks];
  std::atomic<uint32_t> retired;             // the sender dropped the segment: the receiver lets go too
  std::atomic<uint32_t> reader_event_ready;  // the receiver wrote reader_done
  cudaIpcEventHandle_t reader_done;          // recorded after the receiver's last read of a generation
  std::atomic<uint64_t> consumed;            // the last generation whose reads the receiver queued
};
static_assert(sizeof(SegmentHeader) <= kHeaderBytes);

size_t chunk_bytes_for(size_t nbytes) {
  const size_t even = (nbytes + kMaxStagedChunks - 1) / kMaxStagedChunks;
  return std::max(kMinChunk, (even + 4095) / 4096 * 4096);
}

// A mapped segment file; its host data pinned for the copy engines when it has some.
struct Mapping {
  std::string name;
  SegmentHeader* header = nullptr;
  uint8_t* data = nullptr;  // in_host_memory only
  size_t bytes = 0;         // the whole mapping
  bool registered = false;

  ~Mapping() {
    if (registered) cudaHostUnregister(data);
    if (header) munmap(header, bytes);
  }

  void pin(int device) {
    DeviceGuard on(device);
    check(cudaHostRegister(data, bytes - kHeaderBytes, cudaHostRegisterPortable), "cudaHostRegister (shared staging)",
          device);
    registered = true;
  }
};

// Creates (file_bytes > 0) or opens (file_bytes == 0) the segment file `name` and maps it whole.
std::unique_ptr<Mapping> map_segment(const std::string& name, size_t file_bytes) {
  const bool create = file_bytes > 0;
  const int fd = shm_open(name.c_str(), create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600);
  if (fd < 0) throw DeviceError("shared staging: shm_open " + name + ": " + std::strerror(errno));
  if (create && ftruncate(fd, static_cast<off_t>(file_bytes)) != 0) {
    const int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    throw DeviceError("shared staging: sizing " + name + " to " + std::to_string(file_bytes) + " bytes: " +
                      std::strerror(err));
  }
  if (!create) {
    struct stat st {};
    if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < kHeaderBytes) {
      close(fd);
      throw ValueError("shared staging: segment " + name + " is not a staging segment");
    }
    file_bytes = static_cast<size_t>(st.st_size);
  }
  void* p = mmap(nullptr, file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) throw DeviceError("shared staging: mmap " + name + ": " + std::strerror(errno));
  auto m = std::make_unique<Mapping>();
  m->name = name;
  m->bytes = file_bytes;
  m->header = static_cast<SegmentHeader*>(p);
  if (file_bytes > kHeaderBytes) m->data = static_cast<uint8_t*>(p) + kHeaderBytes;
  return m;
}

cudaEvent_t interprocess_event(int device) {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventInterprocess), "cudaEventCreateWithFlags",
        device);
  return e;
}

// --- sending side -------------------------------------------------------------------------------

struct OutSegment {
  std::unique_ptr<Mapping> map;
  int device = 0;
  void* buffer = nullptr;  // in_device_memory: the exported block the receiver copies from
  uint64_t generation = 0;  // of the last staging into it
  cudaEvent_t chunk_events[kMaxStagedChunks] = {};
  cudaEvent_t reader_done = nullptr;  // opened once the receiver published it
  bool mapped_by_receiver() const { return map->header->reader_event_ready.load(std::memory_order_acquire) != 0; }
  bool unread() const { return map->header->consumed.load(std::memory_order_acquire) < generation; }

  // The receiver's reads of the last generation, as an event this process can wait on.
  cudaEvent_t last_read() {
    if (!reader_done)
      check(cudaIpcOpenEventHandle(&reader_done, map->header->reader_done), "cudaIpcOpenEventHandle", device);
    return reader_done;
  }

  // Retires the segment once the receiver's reads are done (a host wait: only when a full channel
  // makes room for a larger tensor).
  void retire() {
    map->header->retired.store(1, std::memory_order_release);
    if (!mapped_by_receiver()) shm_unlink(map->name.c_str());
    if (!buffer) return;
    DeviceGuard on(device);
    if (generation > 0 && mapped_by_receiver()) cudaEventSynchronize(last_read());
    cudaFree(buffer);
  }
};

struct Channels {
  std::mutex mutex;
  std::map<std::string, std::vector<std::unique_ptr<OutSegment>>> out;
  uint64_t made = 0;

  ~Channels() {
    // Names no receiver mapped (and so never unlinked) go with the process; the driver frees the rest.
    for (auto& [channel, segments] : out)
      for (auto& s : segments)
        if (!s->mapped_by_receiver()) shm_unlink(s->map->name.c_str());
  }
};

Channels& channels() {
  static Channels c;
  return c;
}

// A block of device memory another process can map, or nullptr where CUDA IPC is unavailable.
void* exported_buffer(size_t capacity, int device, cudaIpcMemHandle_t& handle) {
  if (const char* where = std::getenv("TROUPE_STAGE_IN"); where && std::string(where) == "host") return nullptr;
  void* buffer = nullptr;
  if (cudaMalloc(&buffer, capacity) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  if (cudaIpcGetMemHandle(&handle, buffer) != cudaSuccess) {
    cudaGetLastError();
    cudaFree(buffer);
    return nullptr;
  }
  return buffer;
}

OutSegment& make_segment(const std::string& channel, size_t capacity, int device, uint64_t serial) {
  auto s = std::make_unique<OutSegment>();
  s->device = device;
  DeviceGuard on(device);
  cudaIpcMemHandle_t handle{};
  s->buffer = exported_buffer(capacity, device, handle);
  const std::string name = "/troupe-stage-" + std::to_string(getpid()) + "-" + std::to_string(serial);
  try {
    s->map = map_segment(name, kHeaderBytes + (s->buffer ? 0 : capacity));
    if (!s->buffer) s->map->pin(device);
  } catch (...) {
    if (s->buffer) cudaFree(s->buffer);
    if (s->map) shm_unlink(name.c_str());
    throw;
  }
  SegmentHeader& h = *s->map->header;
  h.magic = kSegmentMagic;
  h.where = s->buffer ? in_device_memory : in_host_memory;
  h.capacity = capacity;
  h.buffer_device = device;
  h.buffer = handle;
  for (int k = 0; k < kMaxStagedChunks; ++k) {
    s->chunk_events[k] = interprocess_event(device);
    check(cudaIpcGetEventHandle(&h.chunk_events[k], s->chunk_events[k]), "cudaIpcGetEventHandle", device);
  }
  auto& list = channels().out[channel];
  list.push_back(std::move(s));
  return *list.back();
}

void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// --- receiving side -----------------------------------------------------------------------------

struct InSegment {
  std::unique_ptr<Mapping> map;
  int device = 0;          // the sender's GPU: its events and buffer are opened there
  void* buffer = nullptr;  // in_device_memory: the sender's block, mapped here
  cudaEvent_t chunk_events[kMaxStagedChunks] = {};
  cudaEvent_t reader_done = nullptr;
};

std::mutex in_mutex;
std::map<std::string, std::unique_ptr<InSegment>>& in_segments() {
  static auto* m = new std::map<std::string, std::unique_ptr<InSegment>>;  // outlives late receives at exit
  return *m;
}

InSegment& open_segment(const std::string& name) {
  auto& segments = in_segments();
  // Segments their sender retired are let go first (their device blocks are then freed for good).
  for (auto it = segments.begin(); it != segments.end();) {
    InSegment& old = *it->second;
    if (old.map->header->retired.load(std::memory_order_acquire) == 0) {
      ++it;
      continue;
    }
    DeviceGuard on(old.device);
    cudaEventSynchronize(old.reader_done);  // this process's last reads of it are done
    if (old.buffer) cudaIpcCloseMemHandle(old.buffer);
    it = segments.erase(it);
  }
  if (auto it = segments.find(name); it != segments.end()) return *it->second;
  auto s = std::make_unique<InSegment>();
  s->map = map_segment(name, 0);
  shm_unlink(name.c_str());  // mapped on both sides now: the name is no longer needed
  SegmentHeader& h = *s->map->header;
  const bool in_device = h.where == in_device_memory;
  if (h.magic != kSegmentMagic || (h.where != in_host_memory && !in_device) || h.capacity > (size_t(1) << 40) ||
      (!in_device && h.capacity > s->map->bytes - kHeaderBytes) || h.buffer_device < 0 ||
      h.buffer_device >= device_count())
    throw ValueError("shared staging: segment " + name + " is not a staging segment this host can read");
  s->device = h.buffer_device;
  DeviceGuard on(s->device);
  if (in_device)
    check(cudaIpcOpenMemHandle(&s->buffer, h.buffer, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle",
          s->device);
  else
    s->map->pin(s->device);
  for (int k = 0; k < kMaxStagedChunks; ++k)
    check(cudaIpcOpenEventHandle(&s->chunk_events[k], h.chunk_events[k]), "cudaIpcOpenEventHandle", s->device);
  s->reader_done = interprocess_event(s->device);
  check(cudaIpcGetEventHandle(&h.reader_done, s->reader_done), "cudaIpcGetEventHandle", s->device);
  h.reader_event_ready.store(1, std::memory_order_release);
  return *segments.emplace(name, std::move(s)).first->second;
}

struct Reader {
  std::span<const uint8_t> bytes;
  size_t at = 0;
  uint64_t u64() {
    if (at + 8 > bytes.size()) throw ValueError("shared staging: a descriptor of " + std::to_string(bytes.size()) + " bytes is cut short");
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t(bytes[at + i]) << (8 * i);
    at += 8;
    return v;
  }
  std::string text() {
    const uint64_t n = u64();
    if (n > 256 || at + n > bytes.size()) throw ValueError("shared staging: a descriptor's name is malformed");
    std::string s(reinterpret_cast<const char*>(bytes.data() + at), n);
    at += n;
    return s;
  }
};

}  // namespace

std::optional<std::vector<uint8_t>> stage_shared(const Tensor& t, const std::string& channel) {
  if (!t.device().is_cuda() || !t.is_contiguous() || t.nbytes() == 0)
    throw DeviceError("shared staging: expected a contiguous, non-empty CUDA tensor, got " + t.meta().str());
  const int device = t.device().index;
  const size_t nbytes = t.nbytes();
  std::lock_guard lock(channels().mutex);
  auto& list = channels().out[channel];
  OutSegment* segment = nullptr;
  for (auto& s : list)
    if (s->device == device && s->map->header->capacity >= nbytes && !s->unread()) {
      segment = s.get();
      break;
    }
  if (!segment) {
    if (list.size() >= static_cast<size_t>(kSegmentsPerChannel)) {
      // Full: retire a read segment too small for this tensor, or send another way.
      auto small = std::find_if(list.begin(), list.end(), [&](const auto& s) { return !s->unread(); });
      if (small == list.end()) return std::nullopt;
      (*small)->retire();
      list.erase(small);
    }
    segment = &make_segment(channel, nbytes, device, ++channels().made);
  }
  DeviceGuard on(device);
  const cudaStream_t stream = current_stream(device);
  // The receiver's reads of the last generation come before these writes (on the device).
  if (segment->generation > 0) check(cudaStreamWaitEvent(stream, segment->last_read(), 0), "cudaStreamWaitEvent", device);
  const auto* src = static_cast<const uint8_t*>(t.raw_data());
  // Device memory: one copy at the device's own rate. Host memory: chunks, so that the receiver's
  // host-to-device copy of one overlaps this side's device-to-host copy of the next.
  const size_t chunk = segment->buffer ? nbytes : chunk_bytes_for(nbytes);
  const size_t chunks = (nbytes + chunk - 1) / chunk;
  for (size_t k = 0; k < chunks; ++k) {
    const size_t offset = k * chunk, n = std::min(chunk, nbytes - offset);
    if (segment->buffer)
      check(cudaMemcpyAsync(static_cast<uint8_t*>(segment->buffer) + offset, src + offset, n, cudaMemcpyDeviceToDevice,
                            stream),
            "cudaMemcpyAsync (shared staging)", device);
    else
      check(cudaMemcpyAsync(segment->map->data + offset, src + offset, n, cudaMemcpyDeviceToHost, stream),
            "cudaMemcpyAsync (shared staging)", device);
    check(cudaEventRecord(segment->chunk_events[k], stream), "cudaEventRecord", device);
  }
  const uint64_t generation = ++segment->generation;
  std::vector<uint8_t> d;
  put_u64(d, kDescriptorMagic);
  put_u64(d, segment->map->name.size());
  d.insert(d.end(), segment->map->name.begin(), segment->map->name.end());
  put_u64(d, generation);
  put_u64(d, nbytes);
  put_u64(d, chunk);
  put_u64(d, static_cast<uint64_t>(chunks));
  const std::string dtype = name(t.dtype());
  put_u64(d, dtype.size());
  d.insert(d.end(), dtype.begin(), dtype.end());
  put_u64(d, t.shape().size());
  for (int64_t dim : t.shape()) put_u64(d, static_cast<uint64_t>(dim));
  return d;
}

Tensor unstage_shared(std::span<const uint8_t> descriptor, Device device) {
  Reader r{descriptor};
  if (r.u64() != kDescriptorMagic) throw ValueError("shared staging: not a staging descriptor");
  const std::string segment_name = r.text();
  if (segment_name.rfind("/troupe-stage-", 0) != 0 || segment_name.find('/', 1) != std::string::npos)
    throw ValueError("shared staging: '" + segment_name + "' is not a staging segment's name");
  const uint64_t generation = r.u64(), nbytes = r.u64(), chunk = r.u64(), chunks = r.u64();
  const DType dtype = dtype_from_name(r.text());
  const uint64_t ndims = r.u64();
  if (ndims > 8) throw ValueError("shared staging: a descriptor with " + std::to_string(ndims) + " dims");
  Shape shape;
  for (uint64_t i = 0; i < ndims; ++i) shape.push_back(static_cast<int64_t>(r.u64()));
  if (troupe::numel(shape) < 0 || static_cast<uint64_t>(troupe::numel(shape)) * itemsize(dtype) != nbytes ||
      nbytes == 0 || chunk == 0 || chunks > kMaxStagedChunks || (nbytes + chunk - 1) / chunk != chunks)
    throw ValueError("shared staging: a descriptor of " + std::to_string(nbytes) + " bytes in " +
                     std::to_string(chunks) + " chunks does not describe " + TensorMeta{dtype, shape, device}.str());
  std::lock_guard lock(in_mutex);
  InSegment& s = open_segment(segment_name);
  if (nbytes > s.map->header->capacity)
    throw ValueError("shared staging: " + std::to_string(nbytes) + " bytes staged in a segment of " +
                     std::to_string(s.map->header->capacity));
  if (s.map->header->consumed.load(std::memory_order_acquire) >= generation)
    throw ValueError("shared staging: generation " + std::to_string(generation) + " of " + segment_name +
                     " was already taken");
  // Lands on the sender's GPU (its events are there), queued on this thread's stream; a host target
  // waits for each chunk here; another GPU takes a copy from there.
  const Device land = device.is_cuda() ? Device::cuda(s.device) : device;
  Tensor out = Tensor::empty(shape, dtype, land);
  const int index = s.device;
  DeviceGuard on(index);
  const cudaStream_t stream = current_stream(index);
  auto* dst = static_cast<uint8_t*>(out.mutable_raw_data());
  const uint8_t* src = s.buffer ? static_cast<const uint8_t*>(s.buffer) : s.map->data;
  if (!land.is_cuda()) note_sync(Device::cuda(s.device), "staged tensor to host");
  for (uint64_t k = 0; k < chunks; ++k) {
    const size_t offset = k * chunk, n = std::min<size_t>(chunk, nbytes - offset);
    if (land.is_cuda()) {
      check(cudaStreamWaitEvent(stream, s.chunk_events[k], 0), "cudaStreamWaitEvent", index);
      check(cudaMemcpyAsync(dst + offset, src + offset, n, cudaMemcpyDefault, stream), "cudaMemcpyAsync (shared staging)",
            index);
    } else {
      check(cudaEventSynchronize(s.chunk_events[k]), "cudaEventSynchronize", index);
      if (s.buffer) check(cudaMemcpy(dst + offset, src + offset, n, cudaMemcpyDeviceToHost), "cudaMemcpy", index);
      else std::memcpy(dst + offset, src + offset, n);
    }
  }
  check(cudaEventRecord(s.reader_done, stream), "cudaEventRecord", index);
  s.map->header->consumed.store(generation, std::memory_order_release);
  return land == device ? out : out.to(device);
}

}  // namespace troupe::cuda
