#pragma once
// Deterministic kernels (PyTorch's torch.use_deterministic_algorithms): the same inputs give
// bitwise the same outputs in every run of the process, on the same machine and thread counts.
// Troupe's kernels are deterministic for a fixed algorithm; what varies from run to run is the
// choice of algorithm where it is made by timing (the GEMM library, conv2d's plain or blocked
// layouts), and a busy machine times differently. With deterministic kernels on, those choices
// are fixed instead of measured: oneDNN's GEMM (unless TROUPE_GEMM names one), conv2d on plain
// layouts. It is read when a choice is made, so set it before the first kernel runs.
//
//   set_deterministic_kernels(true);   // or TROUPE_DETERMINISTIC=1 in the environment
//   ... train: a run resumed from a checkpoint ends with the same weights as one never stopped
namespace troupe {

bool deterministic_kernels();  // default: TROUPE_DETERMINISTIC=1 in the environment
void set_deterministic_kernels(bool on);

}  // namespace troupe
