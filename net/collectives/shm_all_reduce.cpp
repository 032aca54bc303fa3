#include "net/collectives/shm_all_reduce.h"

#include <fcntl.h>
#include <immintrin.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>

#include "devices/error.h"
#include "net/collectives/reduce_kernels.h"

namespace troupe::net::collectives {

namespace {

constexpr size_t kSlotBytes = 16 << 20;
// Up to this size every rank reduces the whole tensor itself: one hand-off between the ranks
// instead of three, for n times the (tiny) reading.
constexpr size_t kSmallBytes = 64 << 10;
// Waiting: a few microseconds of pause (a peer running on another core answers within that), then
// yielding (a peer waiting for this core gets it at once), then sleeping on a futex. Ranks that
// share CPUs skip the pauses (see cores_each_).
constexpr int kPauses = 200;
constexpr int kYields = 50;

// The CPUs a process may run on; an empty set when its mask cannot be read (it is gone).
cpu_set_t allowed_cpus(pid_t pid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(pid, sizeof set, &set) != 0) CPU_ZERO(&set);
  return set;
}

}  // namespace

// A generation counter other processes wait on (wait_for spins, yields, then sleeps here on a
// futex over its low 32 bits: with two cores shared by several processes, a spinner would steal
// the core the peer needs). raise() wakes sleepers only when there are any: no syscall otherwise.
struct alignas(64) SharedMemoryAllReduce::Flag {
  std::atomic<uint64_t> value{0};
  std::atomic<uint32_t> sleepers{0};

  void raise(uint64_t g) {
    value.store(g, std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_seq_cst) > 0)
      ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&value), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }
  // Sleeps until value may have changed from seen, or about a millisecond passed.
  void sleep(uint64_t seen) {
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (value.load(std::memory_order_seq_cst) == seen) {
      const timespec ms{0, 1000000};
      ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&value), FUTEX_WAIT, static_cast<uint32_t>(seen), &ms,
                nullptr, 0);
    }
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && sizeof(std::atomic<uint64_t>) == 8);

// One rank's segment. Generation g's descriptor (posted[g % 2]) is written before `ready` is raised
// to g (release) and read after it is seen (acquire). A small tensor uses half g % 2 of the slot,
// so a rank may post g+1 while its peers still read g.
struct SharedMemoryAllReduce::Segment {
  Flag ready, reduced, consumed;
  struct Posted {
    uint8_t op, reduce, dtype;
    uint64_t count, seq;
  } posted[2];
  alignas(64) char slot[kSlotBytes];
};

SharedMemoryAllReduce::~SharedMemoryAllReduce() {
  for (Segment* s : segments_)
    if (s) ::munmap(s, segment_bytes_);
  if (memfd_ >= 0) ::close(memfd_);
}

bool SharedMemoryAllReduce::eligible(ProcessGroup& group) {
  Transport& t = group.transport();
  if (!t.shared_memory()) return false;
  for (int global : group.global_ranks())
    if (!t.is_local(global)) return false;
  return true;
}

// The first call: make this rank's segment, tell the others where it is, map theirs, and agree
// on whether everyone succeeded (over ZeroMQ, under the call's own descriptor).
bool SharedMemoryAllReduce::set_up(CollectiveCall& call) {
  const int n = call.size(), r = call.rank();
  segment_bytes_ = sizeof(Segment);
  segments_.assign(static_cast<size_t>(n), nullptr);
  // Not populated: the pages a group's tensors use are faulted in by its first calls of each size
  // (the quorum's builder runs them before a rank changes groups); populating the whole 16 MiB
  // slot of every rank, its own and each peer's, cost a group of 2 ranks a host 32 MiB of page
  // clearing and mapping per rank as it formed, on the CPUs the ranks train on.
  auto map = [&](int fd) -> Segment* {
    void* p = ::mmap(nullptr, segment_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? nullptr : static_cast<Segment*>(p);
  };
  bool ok = false;
  memfd_ = ::memfd_create("troupe-all-reduce", MFD_CLOEXEC);
  if (memfd_ >= 0 && ::ftruncate(memfd_, static_cast<off_t>(segment_bytes_)) == 0) {
    segments_[static_cast<size_t>(r)] = map(memfd_);
    ok = segments_[static_cast<size_t>(r)] != nullptr;
  }
  const Tensor where = Tensor::from_vector<int64_t>({::getpid(), memfd_, ok}, {3});
  cpu_set_t cpus = allowed_cpus(0);
  for (int p = 0; p < n; ++p)
    if (p != r) call.send(p, where);
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    const std::vector<int64_t> w = call.recv(p).to_vector<int64_t>();
    if (w.size() != 3 || !w[2]) {
      ok = false;
      continue;
    }
    cpu_set_t theirs = allowed_cpus(static_cast<pid_t>(w[0]));
    CPU_OR(&cpus, &cpus, &theirs);
    const std::string path = "/proc/" + std::to_string(w[0]) + "/fd/" + std::to_string(w[1]);
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      ok = false;
      continue;
    }
    segments_[static_cast<size_t>(p)] = map(fd);
    ::close(fd);
    ok = ok && segments_[static_cast<size_t>(p)] != nullptr;
  }
  cores_each_ = CPU_COUNT(&cpus) >= n;
  const Tensor verdict = Tensor::scalar<int64_t>(ok);
  for (int p = 0; p < n; ++p)
    if (p != r) call.send(p, verdict);
  for (int p = 0; p < n; ++p)
    if (p != r) ok = call.recv(p).item<int64_t>() != 0 && ok;
  return ok;
}

// Anything on the collective's ZeroMQ lane means trouble: an abort notice, or a frame from a rank
// that made another call.
void SharedMemoryAllReduce::check_inbox(CollectiveCall& call) {
  Transport& t = call.channel.group().transport();
  t.check_healthy();
  if (!t.is_ready(*probe_)) return;
  std::optional<Message> m = t.wait(probe_, Clock::now());
  if (!m) return;
  const std::string where = std::string("all_reduce: collective #") + std::to_string(call.op.collective_seq) +
                            " of group " + std::to_string(call.channel.group_id());
  if (m->header.kind == FrameKind::control) Channel::throw_abort_notice(m->payload);
  const int from = call.channel.group().group_rank(m->source);
  const CommError error(where + ": ranks disagree: rank " + std::to_string(call.rank()) + " called " +
                        describe(call.op) + ", rank " + std::to_string(from) + " called " + describe(m->header.op));
  call.channel.abort(call.op.collective_seq, error);
  throw error;
}

void SharedMemoryAllReduce::wait_for(CollectiveCall& call, int peer, const char* stage, Flag& flag, uint64_t target) {
  for (int spins = 0;; ++spins) {
    const uint64_t seen = flag.value.load(std::memory_order_acquire);
    if (seen >= target) return;
    if (spins < (cores_each_ ? kPauses : 0)) {
      _mm_pause();
      continue;
    }
    if (spins < kPauses + kYields) {
      std::this_thread::yield();
      continue;
    }
    check_inbox(call);
    call.channel.group().check_peer(peer);
    if (Clock::now() > call.deadline)
      throw TimeoutError("all_reduce: collective #" + std::to_string(call.op.collective_seq) + " of group " +
                         std::to_string(call.channel.group_id()) + ": rank " + std::to_string(call.rank()) +
                         " waited in vain for rank " + std::to_string(peer) + " (" + stage + ")");
    flag.sleep(seen);
  }
}

void SharedMemoryAllReduce::post_and_check(CollectiveCall& call, uint64_t g) {
  const int n = call.size(), r = call.rank();
  const OpDescriptor& op = call.op;
  segments_[static_cast<size_t>(r)]->posted[g % 2] = {static_cast<uint8_t>(op.op), static_cast<uint8_t>(op.reduce),
                                                      static_cast<uint8_t>(op.dtype), op.count, op.collective_seq};
  segments_[static_cast<size_t>(r)]->ready.raise(g);
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    Segment& peer = *segments_[static_cast<size_t>(p)];
    wait_for(call, p, "ready", peer.ready, g);
    const Segment::Posted& d = peer.posted[g % 2];
    const OpDescriptor theirs{static_cast<CollectiveOp>(d.op), static_cast<ReduceOp>(d.reduce),
                              static_cast<DType>(d.dtype), d.count, d.seq};
    if (theirs != OpDescriptor{op.op, op.reduce, op.dtype, op.count, op.collective_seq}) {
      const CommError error("all_reduce: collective #" + std::to_string(op.collective_seq) + " of group " +
                            std::to_string(call.channel.group_id()) + ": ranks disagree: rank " + std::to_string(r) +
                            " called " + describe(op) + ", rank " + std::to_string(p) + " called " + describe(theirs));
      call.channel.abort(op.collective_seq, error);
      throw error;
    }
  }
}

// Small tensors: one hand-off. Every rank posts its whole tensor in half g % 2 of its slot and
// reduces all of them, in rank order (so every rank computes the same bits).
void SharedMemoryAllReduce::reduce_small(CollectiveCall& call, const Tensor& data, ReduceOp op, char* out) {
  const int n = call.size(), r = call.rank();
  const size_t bytes = data.nbytes(), elems = static_cast<size_t>(data.numel());
  const uint64_t g = ++generation_;
  auto half = [&](int owner) { return segments_[static_cast<size_t>(owner)]->slot + (g % 2) * (kSlotBytes / 2); };
  // Half g % 2 last held generation g-2 (or, after a large piece, the whole slot was g-1's).
  const uint64_t free_after = std::max(g < 2 ? 0 : g - 2, last_large_);
  for (int p = 0; p < n; ++p)
    if (p != r) wait_for(call, p, "slot reuse", segments_[static_cast<size_t>(p)]->consumed, free_after);
  std::memcpy(half(r), data.raw_data(), bytes);
  post_and_check(call, g);
  const ReduceOp combine = op == ReduceOp::avg ? ReduceOp::sum : op;
  auto contribution = [&](int p) -> const void* { return p == r ? data.raw_data() : half(p); };
  reduce_buffers(out, contribution(0), contribution(1), elems, data.dtype(), combine);
  for (int p = 2; p < n; ++p) reduce_buffers(out, out, contribution(p), elems, data.dtype(), combine);
  if (op == ReduceOp::avg) divide_buffer(out, elems, data.dtype(), n);
  segments_[static_cast<size_t>(r)]->consumed.raise(g);
}

void SharedMemoryAllReduce::reduce_piece(CollectiveCall& call, const Tensor& data, int64_t begin, int64_t end, ReduceOp op,
                                         char* out) {
  const int n = call.size(), r = call.rank();
  const DType dtype = data.dtype();
  const size_t item = itemsize(dtype);
  const auto* in = static_cast<const char*>(data.raw_data());
  const uint64_t g = ++generation_;
  last_large_ = g;
  auto seg_begin = [&](int s) { return begin + (end - begin) * s / n; };
  auto slot_at = [&](int owner, int64_t element) { return segments_[static_cast<size_t>(owner)]->slot + (element - begin) * item; };
  Segment& mine = *segments_[static_cast<size_t>(r)];

  // 1. My slot is free once every peer has consumed the previous piece.
  for (int p = 0; p < n; ++p)
    if (p != r) wait_for(call, p, "slot reuse", segments_[static_cast<size_t>(p)]->consumed, g - 1);
  // 2. The segments others reduce; my own segment is read from my input directly.
  for (int s = 0; s < n; ++s)
    if (s != r) std::memcpy(slot_at(r, seg_begin(s)), in + seg_begin(s) * item, static_cast<size_t>(seg_begin(s + 1) - seg_begin(s)) * item);
  post_and_check(call, g);
  const int64_t b = seg_begin(r), e = seg_begin(r + 1);
  const size_t elems = static_cast<size_t>(e - b);
  char* result = out + b * item;
  const ReduceOp combine = op == ReduceOp::avg ? ReduceOp::sum : op;
  auto contribution = [&](int p) -> const void* { return p == r ? in + b * item : slot_at(p, b); };
  if (n == 1) std::memcpy(result, contribution(0), elems * item);
  else reduce_buffers(result, contribution(0), contribution(1), elems, dtype, combine);
  for (int p = 2; p < n; ++p) reduce_buffers(result, result, contribution(p), elems, dtype, combine);
  if (op == ReduceOp::avg) divide_buffer(result, elems, dtype, n);
  std::memcpy(slot_at(r, b), result, elems * item);
  mine.reduced.raise(g);
  // 4. Every other segment from its owner's slot.
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    Segment& peer = *segments_[static_cast<size_t>(p)];
    wait_for(call, p, "reduced", peer.reduced, g);
    std::memcpy(out + seg_begin(p) * item, slot_at(p, seg_begin(p)), static_cast<size_t>(seg_begin(p + 1) - seg_begin(p)) * item);
  }
  mine.consumed.raise(g);
}

std::optional<Tensor> SharedMemoryAllReduce::run(CollectiveCall& call, uint64_t ticket, const Tensor& data, ReduceOp op) {
  std::unique_lock turn(mutex_);
  turn_.wait(turn, [&] { return serving_ == ticket; });
  turn.unlock();
  struct NextTurn {
    SharedMemoryAllReduce* self;
    ~NextTurn() {
      {
        std::lock_guard lock(self->mutex_);
        ++self->serving_;
      }
      self->turn_.notify_all();
    }
  } next_turn{this};

  if (state_ == State::fresh) state_ = set_up(call) ? State::on : State::off;
  if (state_ == State::off) return std::nullopt;

  Transport& t = call.channel.group().transport();
  probe_ = t.post(call.channel.group_id(), Inbox::collective, static_cast<int64_t>(call.op.collective_seq), -1);
  struct CancelProbe {
    Transport& t;
    std::shared_ptr<Transport::Slot>& probe;
    ~CancelProbe() {
      // Cancels it (nothing more is expected on this lane). It may hold a lost peer's error: that
      // is the call's to report (it may be unwinding with it now), never this destructor's.
      try {
        t.wait(probe, Clock::now());
      } catch (const Error&) {
      }
      probe.reset();
    }
  } cancel{t, probe_};

  const int64_t count = data.numel();
  const int64_t piece = static_cast<int64_t>(kSlotBytes / itemsize(data.dtype()));
  Tensor result = Tensor::empty({count}, data.dtype());
  char* out = static_cast<char*>(result.mutable_raw_data());
  try {
    if (data.nbytes() <= kSmallBytes) {
      reduce_small(call, data, op, out);
    } else {
      for (int64_t begin = 0; begin < count; begin += piece)
        reduce_piece(call, data, begin, std::min(count, begin + piece), op, out);
    }
  } catch (...) {
    state_ = State::off;  // the ranks' generations may now differ: ZeroMQ from here on
    throw;
  }
  return result;
}

}  // namespace troupe::net::collectives
