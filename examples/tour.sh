#!/usr/bin/env bash
# The model tour: what Troupe does so far, each step a real run with its figures.
set -euo pipefail
bin="$(dirname "$0")/../build/bin"
step() { printf '\n== %s\n' "$*"; }

step "troupe info"
"$bin/troupe" info

step "GEMM through troupe::matmul, oneDNN against OpenBLAS (GFLOP/s)"
"$bin/gemm_bench" --compare

step "GatherNd: per-row loop against gather_nd"
"$bin/gathernd_bench"
