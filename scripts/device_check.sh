#!/usr/bin/env bash
# The GPU check: prepared here (no GPU needed), run on a lent GPU machine in one call.
#
#   scripts/device_check.sh pack   # here: builds build-dev/ for sm_80 and sm_90 (+ PTX), no -march=native, and packs
#                                  # the binaries and the Debian libraries they need into .devcheck/ (< 64 MiB)
#   scripts/device_check.sh run    # there: every GPU test, every GPU benchmark and the PyTorch peers; leaves
#                                  # $OUT/device_check.json (one object of figures) and $OUT/device_check.log
#
# With the workplace's `run` tool: carry [".devcheck"], command `bash scripts/device_check.sh run`, timeout_s 420.
# The steps share DEVICE_CHECK_SECONDS (330 by default, under 6 minutes); a step past it is skipped;
# DEVICE_CHECK_STEPS=regex runs only the steps it matches. Here,
# `run` is the dry run: GPU tests skip, benchmarks that need a GPU report their DeviceError, and the
# figures file still comes out. dist_sgd on the GPU needs Fashion-MNIST there, which is not carried.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-dev
pack_dir=.devcheck
binaries=(test_devices test_actors test_dataflow test_models test_net troupe cuda_bench lane_bench gathernd_bench
          lstm_ensemble encoder_bench encoder_graph_bench xlmr_bench train_bench dist_sgd device_p2p_bench)

pack() {
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTROUPE_NATIVE=OFF -DTROUPE_SANITIZER_TESTS=OFF \
    -DCMAKE_CUDA_ARCHITECTURES="80-real;90" >/dev/null
  cmake --build "$build" -j"$(nproc)" --target "${binaries[@]}"
  rm -rf "$pack_dir" && mkdir -p "$pack_dir/libs"
  # Every shared library the binaries use but the GPU machine lacks: not glibc, the C++ runtime or CUDA's own
  # (cudart, cuBLAS, cuDNN, NCCL come with PyTorch's wheels there).
  local bins=() b
  for b in "${binaries[@]}"; do bins+=("$build/bin/$b"); done
  ldd "${bins[@]}" "$build"/lib/*.so | awk '/=> \//{print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
    grep -Ev '/lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nccl)\.so' | grep -v "/$build/" >"$pack_dir/libs.txt" || true
  xargs -a "$pack_dir/libs.txt" cp -L -t "$pack_dir/libs"
  tar -cJf "$pack_dir/troupe.tar.xz" "${bins[@]}" "$build"/lib/*.so* "$pack_dir/libs"
  rm -rf "$pack_dir/libs"
  du -sh "$pack_dir" | awk '{print "device_check: packed " $1 " into '"$pack_dir"'/ (carry limit 64 MiB)"}'
}

# The directory holding a CUDA library there: the toolkit's, or PyTorch's wheels'.
library_dir() {
  local found
  found=$(find /usr/local/cuda/lib64 /usr/local/cuda/lib /opt /usr/lib /usr/local/lib -name "$1" 2>/dev/null | head -1)
  [ -n "$found" ] && dirname "$found"
}

run() {
  local out=${OUT:-/tmp/device_check} root=$PWD
  mkdir -p "$out"
  local log=$out/device_check.log figures=$out/device_check.jsonl
  : >"$log"
  : >"$figures"
  tar -xJf "$pack_dir/troupe.tar.xz"
  # Tests find their fixtures at the source path compiled into them.
  local source_dir
  source_dir=$(grep -a -o '/[^"]*/tests/fixtures' "$build/bin/test_devices" | head -1 | sed 's,/tests/fixtures$,,')
  if [ -n "$source_dir" ] && [ ! -e "$source_dir" ]; then mkdir -p "$(dirname "$source_dir")" && ln -s "$root" "$source_dir"; fi
  local dirs="$root/$pack_dir/libs:$root/$build/lib" lib d
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
    d=$(library_dir "$lib") && dirs="$dirs:$d"
  done
  export LD_LIBRARY_PATH="$dirs:${LD_LIBRARY_PATH:-}" PYTHONUNBUFFERED=1
  local python=python3
  [ -x /opt/torch/.venv/bin/python3 ] && python=/opt/torch/.venv/bin/python3

  # The whole run stays within DEVICE_CHECK_SECONDS (330): each step's limit is cut to what is left.
  local deadline=$(( $(date +%s) + ${DEVICE_CHECK_SECONDS:-330} ))
  # step NAME SECONDS CMD...: runs it with a limit, logs everything, keeps its last JSON line as NAME's figures.
  step() {
    local name=$1 limit=$2 started rc left
    shift 2
    # DEVICE_CHECK_STEPS=regex: only the steps whose names match (a rerun of one benchmark, say).
    if [ -n "${DEVICE_CHECK_STEPS:-}" ] && ! [[ "$name" =~ $DEVICE_CHECK_STEPS ]]; then return; fi
    left=$(( deadline - $(date +%s) ))
    if [ "$left" -lt 5 ]; then
      echo "== $name: skipped, the run's time is spent" | tee -a "$log"
      printf '{"step":"%s","rc":-1,"seconds":0,"figures":null}\n' "$name" >>"$figures"
      return
    fi
    [ "$limit" -le "$left" ] || limit=$left
    started=$(date +%s.%N)
    echo "== $name: $*" | tee -a "$log"
    set +e
    timeout "$limit" "$@" 2>&1 | tee "$out/step.txt" >>"$log"
    rc=${PIPESTATUS[0]}
    set -e
    local line
    line=$(sed -E 's/^\[rank [0-9]+\] //' "$out/step.txt" | grep -E '^\{.*\}$' | tail -1 || true)
    # A step whose whole output is one JSON document over several lines (troupe info --json).
    [ -n "$line" ] || line=$("$python" -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))' \
      "$out/step.txt" 2>/dev/null || true)
    [ -n "$line" ] || line='null'
    printf '{"step":"%s","rc":%d,"seconds":%.1f,"figures":%s}\n' "$name" "$rc" \
      "$(awk "BEGIN{print $(date +%s.%N) - $started}")" "$line" >>"$figures"
    echo "== $name: rc $rc" | tee -a "$log"
  }

  {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "no nvidia-smi"
    "$build/bin/troupe" info || true
  } >>"$log" 2>&1
  step info 20 "$build/bin/troupe" info --json
  # Every GPU test: the [cuda] cases of each layer, then the whole device layer (op fixtures on every device).
  local t
  for t in test_devices test_actors test_dataflow test_models test_net; do
    step "$t [cuda]" 120 "$build/bin/$t" "[cuda]" --reporter compact --durations yes
  done
  step "cuda_bench" 60 "$build/bin/cuda_bench" --reps 20 --json
  step "lane_bench" 30 "$build/bin/lane_bench" --device cuda --json
  step "encoder_graph_bench" 60 "$build/bin/encoder_graph_bench" --device cuda --layers 24 --reps 20 --json
  step "device_p2p_bench" 60 "$build/bin/troupe" launch --nproc 2 -- "$build/bin/device_p2p_bench" --json
  step "device_p2p_bench pinned host" 60 env TROUPE_STAGE_IN=host "$build/bin/troupe" launch --nproc 2 -- \
    "$build/bin/device_p2p_bench" --json
  step "device_p2p_bench host bytes" 60 env TROUPE_SHM=0 "$build/bin/troupe" launch --nproc 2 -- \
    "$build/bin/device_p2p_bench" --json
  step "gathernd_bench" 30 "$build/bin/gathernd_bench" --device cuda --json
  step "lstm_ensemble" 60 "$build/bin/lstm_ensemble" --device cuda --reps 5 --json
  step "encoder_bench" 90 "$build/bin/encoder_bench" --device cuda --layers 24 --reps 5 --dtype bf16 --json
  step "xlmr_bench" 60 "$build/bin/xlmr_bench" --device cuda --reps 5 --profile --json  # op tables in the log
  step "train_bench" 60 env TROUPE_PYTHON="$python" "$build/bin/train_bench" --device cuda --torch --json
  # The PyTorch peers on the same GPU.
  step "lstm_ensemble_torch" 60 "$python" examples/lstm_ensemble_torch.py --device cuda --json
  step "encoder_torch" 60 "$python" examples/encoder_torch.py --device cuda --dtype bf16 --json
  step "xlmr_bench_torch" 60 "$python" examples/xlmr_bench_torch.py 1 64 5 --device cuda --profile --json
  step "enqueue_torch" 20 "$python" examples/enqueue_torch.py --json
  step "gathernd_torch" 30 "$python" examples/gathernd_torch.py --device cuda --json
  # Where the host's time goes in a call to a GPU actor, where perf is installed there (a flat
  # profile by symbol, in $OUT/lane_bench_perf.txt).
  if command -v perf >/dev/null && [[ "perf lane_bench" =~ ${DEVICE_CHECK_STEPS:-.} ]]; then
    step "perf lane_bench" 40 perf record -q -F 10000 -o "$out/lane_bench.perf" "$build/bin/lane_bench" --device cuda \
      --calls 20000 --json
    perf report -i "$out/lane_bench.perf" --stdio --no-children --percent-limit 0.3 2>/dev/null | head -300 \
      >"$out/lane_bench_perf.txt" || true
    rm -f "$out/lane_bench.perf"
  fi
  # One JSON object of every step's figures.
  "$python" - "$figures" "$out/device_check.json" <<'PY' || cp "$figures" "$out/device_check.json"
import json, sys
steps = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
json.dump({s["step"]: s for s in steps}, open(sys.argv[2], "w"), indent=1)
PY
  rm -f "$out/step.txt"
  echo "device_check: figures in $out/device_check.json, log in $log"
}

case "${1:-}" in
  pack) pack ;;
  run) run ;;
  *) sed -n '2,13p' "$0"; exit 2 ;;
esac
