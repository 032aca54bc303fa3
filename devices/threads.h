#pragma once
// Intra-op parallelism: how many threads one kernel (GEMM, oneDNN primitives) may use.
// The actor runtime's thread budget sets it so that actors x intra-op threads never exceed
// the cores. Kernels call apply_intra_op_threads() on their own thread before going parallel.
//
//   set_intra_op_threads(1);    // every kernel single-threaded: actors provide the parallelism
#include <string>

namespace troupe {

int hardware_cores();              // cores this process may run on (affinity mask)
int intra_op_threads();            // current setting (default: hardware_cores())
void set_intra_op_threads(int n);  // n >= 1; ValueError otherwise
// The process-wide setting alone: set_intra_op_threads, else TROUPE_INTRA_OP_THREADS, else
// hardware_cores(). Shares of the cores that the runtime hands out stay within it.
int global_intra_op_threads();
// Makes the calling thread's OpenMP/BLAS thread count match intra_op_threads() (cheap when it does).
void apply_intra_op_threads();
// A per-thread setting that wins over the global one while set (0 clears it): the actor runtime
// sets it around each task to its share of the cores.
int thread_intra_op_threads();
void set_thread_intra_op_threads(int n);
// A share of the cores asked on every intra_op_threads() call of a thread without its own
// setting (capped by the global setting); the actor runtime installs one that follows how many
// tasks are running now, so a long task gives up threads when others start and takes them back
// when they end. nullptr removes it.
void set_intra_op_share(int (*share)());
// Names the calling thread as top -H, perf and gdb show it (at most 15 characters kept).
void name_this_thread(const char* name);

}  // namespace troupe
