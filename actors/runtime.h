#pragma once
// Runtime: owns the caf::actor_system whose worker actors run forked tasks, and the thread
// budget that splits the cores between actors (inter-op) and kernels (intra-op).
//
//   troupe::Runtime runtime({.workers = 2});   // optional: a default one starts on first fork
//   auto f = troupe::fork([](int x) { return x + 1; }, 41);
//   int y = troupe::wait(f);                   // 42
//
// Thread budget: with intra_op_threads = 0 (the default) a kernel gets cores / (tasks running
// now, plus threads outside the runtime that forked and have not waited since), at least 1,
// decided at each kernel call: serial code uses every core inside its GEMMs, N parallel tasks
// on N cores run single-threaded kernels, and a task left alone takes the cores back.
#include <memory>
#include <string>

namespace caf {
class actor_system;
}

namespace troupe {

// What an idle scheduler thread does. CAF's own way (poll) checks its queue for ~25 ms after its
// last job, waking every 50 us, so that work a sibling queued is stolen soon; sleep waits to be
// woken for work sent to it, and steals queued work only every 10 ms. automatic: sleep when the
// ranks on this machine outnumber its cores (the larger of LOCAL_WORLD_SIZE, as `troupe launch`
// sets it, and note_ranks_on_machine), where those wake-ups took the cores from the ranks that had
// work; else poll. The environment's TROUPE_IDLE_WORKERS=poll|sleep overrides automatic.
enum class IdleWorkers { automatic, poll, sleep };

// How many ranks of the job share this machine's cores, network namespaces included: a
// transport says so once connected (ranks on other "hosts" of one machine are not known from
// LOCAL_WORLD_SIZE). Only a runtime started after the call counts them: CAF fixes its
// scheduler's polling when it starts.
void note_ranks_on_machine(int ranks);

struct RuntimeOptions {
  int workers = 0;           // scheduler threads and worker actors; 0: the cores
  int intra_op_threads = 0;  // 0: adaptive (see above); n: every kernel uses n threads
  IdleWorkers idle_workers = IdleWorkers::automatic;
};

class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = {});  // becomes current(); one at a time
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The runtime in use: the one constructed last and still alive, else a default one.
  static Runtime& current();

  caf::actor_system& system();
  int workers() const;
  const RuntimeOptions& options() const;
  std::string describe() const;  // "2 worker actors on 2 threads, intra-op adaptive (2 cores)"

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe
