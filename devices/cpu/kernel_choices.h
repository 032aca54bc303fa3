#pragma once
// Kernel choices measured on this machine, kept for the next process. Where a kernel is chosen
// by timing (conv2d's layouts per geometry, the GEMM library), the first process to need the
// choice measures it and appends it to a file; later ones read it there and skip the timing, as
// cuDNN's and Triton's autotuning caches do. A rank started again joins its job sooner: the
// warm-up of dist_sgd's kernels took 445 ms measured, 100 ms known, on an idle 2-core Zen 4.
//
//   const std::string key = "conv2d/forward/" + geometry;
//   std::optional<std::string> known = remembered_choice(key);
//   const std::string layout = known ? *known : measure();
//   if (!known) remember_choice(key, layout);
//
// One file per machine kind: its name hashes what the choices depend on (the CPU's family, model,
// stepping and flags, its logical CPUs, the kernels' ISA cap, the oneDNN and OpenBLAS builds,
// OPENBLAS_CORETYPE). Lines "KEY VALUE", appended with one write each, so processes may share it;
// the last line for a key wins, and lines that do not parse are skipped (a choice only ever
// affects speed, and a caller checks the value it gets); a file over 1 MiB is not read, and the
// next choice kept starts it over. The directory: $TROUPE_KERNEL_CACHE, else
// $XDG_CACHE_HOME/troupe, else $HOME/.cache/troupe; TROUPE_KERNEL_CACHE=off keeps nothing (every
// process measures again). Deterministic kernels (determinism.h) measure nothing, so they neither
// read nor write it.
#include <optional>
#include <string>

namespace troupe {

// The value kept for key, if any (keys and values: printable ASCII, no spaces).
std::optional<std::string> remembered_choice(const std::string& key);
// Keeps key's value for this process and, where the file can be written, for the next ones.
// ValueError for a key or value that is empty or holds anything else.
void remember_choice(const std::string& key, const std::string& value);
// The file read and appended to ("" when off, or where no directory can be found).
std::string kernel_choices_file();
// Uses path instead from now on (read afresh: the choices kept so far in this process are
// dropped); "" keeps nothing. Tests point it at a scratch file.
void set_kernel_choices_file(const std::string& path);

}  // namespace troupe
