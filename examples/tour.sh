#!/usr/bin/env bash
# The model tour: what Troupe does, each step a real run with its figures (a few minutes in all).
set -euo pipefail
bin="$(cd "$(dirname "$0")/../build/bin" && pwd)"
step() { printf '\n== %s\n' "$*"; }
launch() { "$bin/troupe" launch "$@"; }

step "troupe info: this machine, kernel backends, the measured GEMM choice, CUDA"
"$bin/troupe" info

step "GEMM through troupe::matmul, against OpenBLAS (GFLOP/s)"
"$bin/gemm_bench" --compare

step "GatherNd: per-row loop against gather_nd"
"$bin/gathernd_bench"

step "fork/wait: TorchScript's tutorial: 100 forks of neg"
"$bin/fork_overhead" --reps 200

step "LSTM ensemble (4 bidirectional LSTMs, T=50 B=50 C=1024): serial, directions forked, members forked"
"$bin/lstm_ensemble" --reps 1 --trace "${TMPDIR:-/tmp}/troupe_lstm_trace.json"

step "Dataflow graphs: per-node overhead, a pipelined service, the ensemble as a graph, a graph on two ranks"
"$bin/graph_bench"
"$bin/graph_pipeline"
"$bin/graph_lstm"
launch --nproc 2 -- "$bin/graph_ranks"

step "Distributed: p2p, all_reduce in a group, the distributed tutorial's hand-written ring beside the library's"
launch --nproc 2 -- "$bin/p2p_blocking"
launch --nproc 2 -- "$bin/p2p_nonblocking"
launch --nproc 2 -- "$bin/all_reduce_group"
launch --nproc 2 -- "$bin/ring_all_reduce"
launch --nproc 2 -- "$bin/all_reduce_bench"

step "Remote actors: the LSTM ensemble's members spread over 2 ranks, XLM-R in 2 pipeline stages, call costs"
launch --nproc 2 -- "$bin/remote_ensemble" --C 512 --reps 1
launch --nproc 2 -- "$bin/pipeline_xlmr" --batch 16 --reps 1
TROUPE_TRANSPORT=tcp TROUPE_SHM=0 launch --nproc 2 -- "$bin/remote_bench"

step "Training: the distributed tutorial's Net, one step on one core"
"$bin/train_bench"

step "Better Transformer: an XLM-R-large-shaped encoder (24 layers) on lengths 4, 5, 250: general path, fastpath dense, fastpath nested, and the fastpaths with bf16 GEMMs"
"$bin/encoder_bench" --layers 24 --reps 1 --dtype bf16

step "XLM-R base (random weights): text in, class logits out, through a SentencePiece model trained here on the test corpus"
spm_dir="$(mktemp -d)"
trap 'rm -rf "$spm_dir"' EXIT
spm_train --input="$(dirname "$0")/../tests/fixtures/xlmr/corpus.txt" --model_prefix="$spm_dir/tour" --vocab_size=200 \
  --character_coverage=0.98 --model_type=unigram >"$spm_dir/train.log" 2>&1
"$bin/xlmr_classify" --spm "$spm_dir/tour.model" --config base --classes 3 \
  "The river runs through the middle of the town." "A short one." "Der Fluss fliesst durch die Stadt."
"$bin/xlmr_classify" --spm "$spm_dir/tour.model" --config base --classes 3 --dtype bf16 \
  "The river runs through the middle of the town." "A short one." "Der Fluss fliesst durch die Stadt."

step "Distributed SGD on Fashion-MNIST, 2 ranks, one epoch (the distributed tutorial's recipe; --epochs 10 for the full run)"
launch --nproc 2 -- "$bin/dist_sgd" --epochs 1

step "On the GPU: the seed workloads again with --device cuda (each checks itself against the CPU or its own variants)"
cuda_reason="$("$bin/troupe" info --json |
  python3 -c 'import json, sys; c = json.load(sys.stdin)["cuda"]; print("" if c["available"] else c.get("reason") or "unavailable")')"
if [[ -z "$cuda_reason" ]]; then
  "$bin/gathernd_bench" --device cuda
  "$bin/lstm_ensemble" --device cuda --reps 3
  "$bin/encoder_bench" --device cuda --layers 24 --reps 3 --dtype bf16
  "$bin/xlmr_bench" --device cuda
  "$bin/train_bench" --device cuda
  launch --nproc 2 -- "$bin/dist_sgd" --device cuda --epochs 1  # both ranks share cuda:0
else
  echo "skipped the --device cuda runs: no GPU here ($cuda_reason)"
fi
