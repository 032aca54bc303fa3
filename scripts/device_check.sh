#!/usr/bin/env bash
# The GPU check: prepared here (no GPU needed), run on a lent GPU machine in one call.
#
#   scripts/device_check.sh pack          # here: builds build-dev/ for sm_80 and sm_90 (+ PTX), no -march=native, and
#                                         # packs the binaries, the Debian libraries they need, the source path
#                                         # compiled into them and their cuDNN version into .devcheck/ (< 64 MiB)
#   scripts/device_check.sh pack DIR      # the same from a build directory configured that way (a warm one)
#   scripts/device_check.sh run           # there: every GPU benchmark and the PyTorch peers, then every GPU test;
#                                         # leaves $OUT/device_check.json (one object of figures) and the log
#   scripts/device_check.sh run --quick   # there: only the new kernels' correctness tests, under 2 minutes
#   scripts/device_check.sh run --goals N # there: the goals' benchmarks and peers only, N interleaved rounds,
#                                         # each goal on the median of its figures (about 50 s a round)
#
# With the workplace's `run` tool: carry [".devcheck"], command `bash scripts/device_check.sh run`, timeout_s 420
# (--quick: 180). The steps share DEVICE_CHECK_SECONDS (330 by default, under 6 minutes); a step past it is
# skipped, so the figures come first and the long test steps last. DEVICE_CHECK_STEPS=regex runs only the
# steps it matches. A GPU test step fails when a GPU is there and the binary skipped every case. Here, `run`
# is the dry run: GPU tests skip, benchmarks that need a GPU report their DeviceError, and the figures file
# still comes out; DEVICE_CHECK_BUILD=build runs it on an unpacked build of this tree instead of the pack.
# dist_sgd on the GPU needs Fashion-MNIST there, which is not carried.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-dev
pack_dir=.devcheck
binaries=(test_devices test_actors test_dataflow test_models test_net troupe cuda_bench lstm_gemm_bench lane_bench gathernd_bench
          attention_bench lstm_ensemble encoder_bench encoder_graph_bench xlmr_bench train_bench dist_sgd device_p2p_bench)

pack() {
  if [ -n "${1:-}" ]; then
    build=${1%/}  # a build of this tree made elsewhere: it must run on any x86-64 CPU and on sm_90
    grep -q '^TROUPE_NATIVE:BOOL=OFF' "$build/CMakeCache.txt" &&
      grep -Eq '^CMAKE_CUDA_ARCHITECTURES:STRING=.*90' "$build/CMakeCache.txt" || {
      echo "device_check: $build is not configured with -DTROUPE_NATIVE=OFF and an sm_90 CUDA architecture" >&2
      exit 2
    }
  else
    export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTROUPE_NATIVE=OFF -DTROUPE_SANITIZER_TESTS=OFF \
      -DCMAKE_CUDA_ARCHITECTURES="80-real;90" >/dev/null
  fi
  cmake --build "$build" -j"$(nproc)" --target "${binaries[@]}"
  rm -rf "$pack_dir" && mkdir -p "$pack_dir/libs"
  # Every shared library the binaries use but the GPU machine lacks: not glibc, the C++ runtime or CUDA's own
  # (cudart, cuBLAS, cuDNN, NCCL come with PyTorch's wheels there).
  local bins=() b
  for b in "${binaries[@]}"; do bins+=("$build/bin/$b"); done
  ldd "${bins[@]}" "$build"/lib/*.so | awk '/=> \//{print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|librt|libresolv|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
    grep -Ev '/lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nccl)\.so' | grep -vF "$(cd "$build" && pwd)/" >"$pack_dir/libs.txt" || true
  xargs -a "$pack_dir/libs.txt" cp -L -t "$pack_dir/libs"
  # The tests find their fixtures under the source path compiled into them; the binaries need a cuDNN
  # of this major version and at least this minor one.
  sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" >"$pack_dir/source_dir"
  cudnn_header_version >"$pack_dir/cudnn_version"
  # Stored as build-dev/ whatever the build was called: `run` looks there.
  tar -cJf "$pack_dir/troupe.tar.xz" --transform "s,^${build#/},build-dev," "${bins[@]}" "$build"/lib/*.so* \
    "$pack_dir/libs"
  rm -rf "$pack_dir/libs"
  du -sh "$pack_dir" | awk '{print "device_check: packed " $1 " into '"$pack_dir"'/ (carry limit 64 MiB)"}'
}

# The cuDNN version the build compiles against (9.19.0, say), from the header CMake found; empty without one.
cudnn_header_version() {
  local dir header
  dir=$(sed -n 's/^TROUPE_CUDNN_INCLUDE_DIR:PATH=//p' "$build/CMakeCache.txt")
  header=$dir/cudnn_version.h
  [ -f "$header" ] || return 0
  awk '/#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) /{v[$2]=$3} END{print v["CUDNN_MAJOR"] "." v["CUDNN_MINOR"] "." v["CUDNN_PATCHLEVEL"]}' \
    "$header"
}

# The directory holding a CUDA library there: the toolkit's, or PyTorch's wheels'.
library_dir() {
  local found
  found=$(find /usr/local/cuda/lib64 /usr/local/cuda/lib /opt /usr/lib /usr/local/lib -name "$1" 2>/dev/null | head -1)
  [ -n "$found" ] && dirname "$found"
}

# The tests read their fixtures under the source path compiled into them, which pack wrote down: a
# link to this tree there, where nothing is. The path is checked, not trusted.
link_source_dir() {
  local root=$1 source_dir
  source_dir=$(cat "$pack_dir/source_dir" 2>/dev/null || true)
  if ! [[ "$source_dir" =~ ^(/[A-Za-z0-9._+-]+)+$ ]] || [[ "$source_dir" == *..* ]]; then
    echo "device_check: no usable source path in $pack_dir/source_dir ('$source_dir'): the tests that read fixtures fail"
    return
  fi
  [ -e "$source_dir" ] || { mkdir -p "$(dirname "$source_dir")" && ln -s "$root" "$source_dir"; }
}

# The binaries need the cuDNN they were built against, or a later one of its major version: an older
# one fails every cuDNN call (conv2d) deep inside the tests. Said first, in the log.
check_cudnn() {
  local python=$1 built=$2 dir found
  [ -n "$built" ] || return 0  # built without cuDNN
  if ! dir=$(library_dir libcudnn.so.9); then
    echo "device_check: the binaries were built against cuDNN $built, and this machine has no libcudnn.so.9" >&2
    return 1
  fi
  found=$("$python" -c 'import ctypes, sys; v = ctypes.CDLL(sys.argv[1]).cudnnGetVersion()
print(f"{v // 10000}.{v % 10000 // 100}.{v % 100}")' "$dir/libcudnn.so.9") || {
    echo "device_check: could not read the version of $dir/libcudnn.so.9" >&2
    return 1
  }
  local built_major=${built%%.*} built_minor found_major=${found%%.*} found_minor
  built_minor=$(cut -d. -f2 <<<"$built")
  found_minor=$(cut -d. -f2 <<<"$found")
  if [ "$found_major" != "$built_major" ] || [ "$found_minor" -lt "$built_minor" ]; then
    echo "device_check: the binaries were built against cuDNN $built, and this machine has cuDNN $found" \
      "($dir/libcudnn.so.9): pack against a cuDNN $found_major.x no later than $found, or carry cuDNN $built" >&2
    return 1
  fi
  echo "device_check: cuDNN $found here, the binaries built against $built"
}

run() {
  local quick=0 rounds=0
  case "${1:-}" in
    --quick) quick=1 ;;
    --goals) rounds=${2:-3}; [[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "device_check: --goals takes a count of rounds" >&2; exit 2; } ;;
    "") ;;
    *) echo "device_check: run takes --quick, --goals N or nothing, not '$1'" >&2; exit 2 ;;
  esac
  local out=${OUT:-/tmp/device_check} root=$PWD built_cudnn
  mkdir -p "$out"
  local log=$out/device_check.log figures=$out/device_check.jsonl
  : >"$log"
  : >"$figures"
  if [ -n "${DEVICE_CHECK_BUILD:-}" ]; then
    build=$DEVICE_CHECK_BUILD  # a build of this tree: its fixtures are where it was compiled
    built_cudnn=$(cudnn_header_version)
  else
    tar -xJf "$pack_dir/troupe.tar.xz"
    link_source_dir "$root" | tee -a "$log"
    built_cudnn=$(cat "$pack_dir/cudnn_version")
  fi
  local dirs="$root/$pack_dir/libs:$root/$build/lib" lib d
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
    d=$(library_dir "$lib") && dirs="$dirs:$d"
  done
  export LD_LIBRARY_PATH="$dirs:${LD_LIBRARY_PATH:-}" PYTHONUNBUFFERED=1
  local python=python3
  [ -x /opt/torch/.venv/bin/python3 ] && python=/opt/torch/.venv/bin/python3
  # A cuDNN older than the build's fails the cuDNN calls (conv2d) only: the rest still runs and is measured.
  check_cudnn "$python" "$built_cudnn" 2>&1 | tee -a "$log" ||
    echo "device_check: going on; conv2d and the steps that use it will fail" | tee -a "$log"
  local has_gpu=0
  nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && has_gpu=1

  # The whole run stays within DEVICE_CHECK_SECONDS (330): each step's limit is cut to what is left.
  local deadline=$(( $(date +%s) + ${DEVICE_CHECK_SECONDS:-330} ))
  # figures_line NAME RC SECONDS FIGURES: one step's record in the figures file (FIGURES: JSON, or null).
  figures_line() {
    printf '{"step":"%s","rc":%d,"seconds":%.1f,"figures":%s}\n' "$1" "$2" "$3" "$4" >>"$figures"
  }
  # step NAME SECONDS CMD...: runs it with a limit, logs everything, keeps its last JSON line as NAME's figures.
  # With `verdict=FN step ...`, FN OUTPUT CMD... may fail a step that exited 0.
  step() {
    local name=$1 limit=$2 started rc left
    shift 2
    # DEVICE_CHECK_STEPS=regex: only the steps whose names match (a rerun of one benchmark, say).
    if [ -n "${DEVICE_CHECK_STEPS:-}" ] && ! [[ "$name" =~ $DEVICE_CHECK_STEPS ]]; then return; fi
    left=$(( deadline - $(date +%s) ))
    if [ "$left" -lt 5 ]; then
      echo "== $name: skipped, the run's time is spent" | tee -a "$log"
      figures_line "$name" -1 0 null
      return
    fi
    [ "$limit" -le "$left" ] || limit=$left
    started=$(date +%s.%N)
    echo "== $name: $*" | tee -a "$log"
    set +e
    timeout "$limit" "$@" 2>&1 | tee "$out/step.txt" >>"$log"
    rc=${PIPESTATUS[0]}
    set -e
    if [ "$rc" -eq 0 ] && [ -n "${verdict:-}" ] && ! "$verdict" "$out/step.txt" "$@"; then rc=1; fi
    local line
    line=$(sed -E 's/^\[rank [0-9]+\] //' "$out/step.txt" | grep -E '^\{.*\}$' | tail -1 || true)
    # A step whose whole output is one JSON document over several lines (troupe info --json).
    [ -n "$line" ] || line=$("$python" -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))' \
      "$out/step.txt" 2>/dev/null || true)
    [ -n "$line" ] || line='null'
    figures_line "$name" "$rc" "$(awk "BEGIN{print $(date +%s.%N) - $started}")" "$line"
    echo "== $name: rc $rc" | tee -a "$log"
  }
  # A verdict: on a machine with a GPU, a test binary that skipped every case it selected tested nothing
  # (a build or a driver that cannot reach the GPU), which is a failure, not a pass.
  ran_a_case() {
    local output=$1 bin=$2 spec=$3 cases skipped
    [ "$has_gpu" = 1 ] || return 0
    cases=$("$bin" "$spec" --list-test-names-only | grep -c . || true)
    skipped=$(grep -c 'SKIPPED:' "$output" || true)
    if [ "$cases" -gt 0 ] && [ "$skipped" -ge "$cases" ]; then
      echo "== all $cases cases skipped on a machine with a GPU: failed" | tee -a "$log"
      return 1
    fi
  }
  # gpu_tests NAME SECONDS BINARY SPEC: the test cases SPEC selects (Catch2's test spec).
  gpu_tests() {
    verdict=ran_a_case step "$1" "$2" "$3" "$4" --reporter compact --durations yes
  }

  # all_gpu_tests: each binary's [cuda] cases as a step of its own, run concurrently within what the
  # deadline leaves (at most 150 s); their outputs are logged one after another when all have ended.
  all_gpu_tests() {
    local t limit left pids=() started
    [ -z "${DEVICE_CHECK_STEPS:-}" ] || [[ "tests [cuda]" =~ $DEVICE_CHECK_STEPS ]] || return 0
    deadline=$(( deadline + 120 ))
    left=$(( deadline - $(date +%s) ))
    limit=$(( left < 150 ? left : 150 ))
    started=$(date +%s.%N)
    for t in test_devices test_actors test_dataflow test_models test_net; do
      if [ "$limit" -lt 5 ]; then
        figures_line "$t [cuda]" -1 0 null
        continue
      fi
      ( set +e; timeout "$limit" "$build/bin/$t" "[cuda]" --reporter compact --durations yes >"$out/$t.txt" 2>&1
        echo $? >"$out/$t.rc" ) &
      pids+=($!)
    done
    [ "$limit" -ge 5 ] || { echo "== tests [cuda]: skipped, the run's time is spent" | tee -a "$log"; return; }
    echo "== tests [cuda]: five binaries at once, ${limit} s each at most" | tee -a "$log"
    wait "${pids[@]}" || true
    local seconds rc
    seconds=$(awk "BEGIN{print $(date +%s.%N) - $started}")
    for t in test_devices test_actors test_dataflow test_models test_net; do
      rc=$(cat "$out/$t.rc")
      [ "$rc" -ne 0 ] || ran_a_case "$out/$t.txt" "$build/bin/$t" "[cuda]" || rc=1
      { echo "== $t [cuda]: rc $rc"; cat "$out/$t.txt"; } >>"$log"
      echo "== $t [cuda]: rc $rc, $(grep -E '^(Passed|Failed|No tests ran)' "$out/$t.txt" | tail -1)"
      figures_line "$t [cuda]" "$rc" "$seconds" null
      rm -f "$out/$t.txt" "$out/$t.rc"
    done
  }

  {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "no nvidia-smi"
    "$build/bin/troupe" info || true
  } >>"$log" 2>&1
  step info 20 "$build/bin/troupe" info --json
  if [ "$rounds" -gt 0 ]; then
    # The goals' benchmarks and their PyTorch peers only, in interleaved rounds (this machine's
    # figures move by 10-20% from run to run): the goals then take each figure's median over the rounds.
    local r
    for r in $(seq "$rounds"); do
      step "lane_bench round $r" 30 "$build/bin/lane_bench" --device cuda --json
      step "enqueue_torch round $r" 20 "$python" examples/enqueue_torch.py --json
      step "lstm_ensemble round $r" 60 "$build/bin/lstm_ensemble" --device cuda --reps 9 --json
      step "lstm_ensemble_torch round $r" 60 "$python" examples/lstm_ensemble_torch.py --device cuda --json
      step "encoder_bench round $r" 90 "$build/bin/encoder_bench" --device cuda --layers 24 --reps 5 --dtype bf16 --json
      step "encoder_torch round $r" 60 "$python" examples/encoder_torch.py --device cuda --dtype bf16 --json
      step "attention_bench round $r" 30 "$build/bin/attention_bench" --device cuda --json
      step "attention_torch round $r" 60 "$python" examples/attention_torch.py --device cuda --json
    done
  elif [ "$quick" = 1 ]; then
    # The kernels of issue 42 (attention: its cases at XLM-R shapes and other widths, bf16 GEMMs, layer
    # norm, add + layer norm, the vectorised elementwise kernels, the LSTM) and the back end's review
    # fixes; then the bf16 models, the serving graph and the LSTM ensemble on the GPU.
    gpu_tests "test_devices quick" 110 "$build/bin/test_devices" \
      'cuda packed_attention*,cuda linear_bf16*,cuda layer_norm*,cuda add_layer_norm*,cuda elementwise*,cuda lstm*,[cuda][cuda_safety]'
    gpu_tests "test_models quick" 60 "$build/bin/test_models" '[cuda][bf16],[cuda][serving_graph],[cuda][lstm_gpu]'
    gpu_tests "test_actors quick" 30 "$build/bin/test_actors" '[lane][cuda]'  # the inline call's marks and frees
  else
    # Figures first; the deadline keeps the last 120 s for the tests, which run at once at the end.
    deadline=$(( deadline - 120 ))
    step "cuda_bench" 60 "$build/bin/cuda_bench" --reps 20 --json
    # Attention alone on the serving batch's lengths, beside PyTorch's FlashAttention varlen (bf16) and
    # memory-efficient kernel (f32).
    step "attention_bench" 30 "$build/bin/attention_bench" --device cuda --json
    step "attention_torch" 60 "$python" examples/attention_torch.py --device cuda --json
    step "attention_bench large" 30 "$build/bin/attention_bench" --device cuda --model large --json
    step "attention_torch large" 60 "$python" examples/attention_torch.py --device cuda --model large --json
    step "lane_bench" 30 "$build/bin/lane_bench" --device cuda --json
    step "encoder_graph_bench" 60 "$build/bin/encoder_graph_bench" --device cuda --layers 24 --reps 20 --json
    step "lstm_ensemble" 60 "$build/bin/lstm_ensemble" --device cuda --reps 5 --json
    step "lstm_ensemble launched steps" 60 "$build/bin/lstm_ensemble" --device cuda --reps 5 --step-loop launches --json
    # The step's GEMM alone: cuBLAS's choice against every cuBLASLt algorithm, alone and 8 loops side by side.
    step "lstm_gemm_bench" 60 "$build/bin/lstm_gemm_bench" --json
    step "lstm_ensemble fused steps" 60 "$build/bin/lstm_ensemble" --device cuda --reps 5 --step-kernel fused --json
    step "encoder_bench" 90 "$build/bin/encoder_bench" --device cuda --layers 24 --reps 5 --dtype bf16 --json
    step "xlmr_bench" 60 "$build/bin/xlmr_bench" --device cuda --reps 5 --graph --profile --json  # op tables in the log
    # The PyTorch peers on the same GPU.
    step "lstm_ensemble_torch" 60 "$python" examples/lstm_ensemble_torch.py --device cuda --json
    step "encoder_torch" 60 "$python" examples/encoder_torch.py --device cuda --dtype bf16 --json
    step "xlmr_bench_torch" 60 "$python" examples/xlmr_bench_torch.py 1 64 5 --device cuda --profile --json
    step "enqueue_torch" 20 "$python" examples/enqueue_torch.py --json
    step "gathernd_bench" 30 "$build/bin/gathernd_bench" --device cuda --json
    step "gathernd_torch" 30 "$python" examples/gathernd_torch.py --device cuda --json
    step "train_bench" 60 env TROUPE_PYTHON="$python" "$build/bin/train_bench" --device cuda --torch --json
    step "device_p2p_bench" 60 "$build/bin/troupe" launch --nproc 2 -- "$build/bin/device_p2p_bench" --json
    step "device_p2p_bench pinned host" 60 env TROUPE_STAGE_IN=host "$build/bin/troupe" launch --nproc 2 -- \
      "$build/bin/device_p2p_bench" --json
    step "device_p2p_bench host bytes" 60 env TROUPE_SHM=0 "$build/bin/troupe" launch --nproc 2 -- \
      "$build/bin/device_p2p_bench" --json
    # Every GPU test: the [cuda] cases of each layer, the five binaries at once (one GPU holds them all),
    # so the test stage costs its slowest binary, not their sum.
    all_gpu_tests
  fi
  # One JSON object of every step's figures.
  "$python" - "$figures" "$out/device_check.json" <<'PY' || cp "$figures" "$out/device_check.json"
import json, statistics, sys
steps = {s["step"]: s for s in (json.loads(line) for line in open(sys.argv[1]) if line.strip())}

# A step's figure, or with --goals the median of its rounds' ("NAME round R").
def figure(step, key, scale=1.0):
    values = []
    for name, s in steps.items():
        if name != step and not name.startswith(step + " round "):
            continue
        figures = s.get("figures")  # a failed step's is its error text
        value = figures.get(key) if isinstance(figures, dict) else None
        if isinstance(value, (int, float)):
            values.append(value * scale)
    return statistics.median(values) if values else None

# Issue 42's goals, each as Troupe's figure over PyTorch's from this run: for times, at most the goal;
# for speeds (tokens/s, attention's speed), at least. A figure a step did not give leaves the ratio null.
def ratio(name, ours, theirs, goal, better):
    r = ours / theirs if ours is not None and theirs else None
    met = None if r is None else (r <= goal if better == "lower" else r >= goal)
    return name, {"troupe": ours, "pytorch": theirs, "ratio": None if r is None else round(r, 3), "goal": goal,
                  "better": better, "met": met}

tokens = [t for t in (figure("xlmr_bench", "bf16_tokens_per_s"), figure("xlmr_bench", "graph_bf16_tokens_per_s")) if t]
goals = dict([
    ratio("xlmr_bf16_tokens_per_s", max(tokens) if tokens else None, figure("xlmr_bench_torch", "bf16_tokens_per_s"), 1.5, "higher"),
    ratio("encoder_nested_f32_ms", figure("encoder_bench", "fast_nested_ms"), figure("encoder_torch", "fast_nested_ms"), 0.8, "lower"),
    ratio("encoder_nested_bf16_ms", figure("encoder_bench", "bf16_nested_ms"), figure("encoder_torch", "bf16_nested_ms"), 0.7, "lower"),
    ratio("lstm_ensemble_ms", figure("lstm_ensemble", "fork_ensemble_s", 1e3), figure("lstm_ensemble_torch", "best_ms"), 0.6, "lower"),
    ratio("gpu_actor_call_us", figure("lane_bench", "enqueue_us"), figure("enqueue_torch", "torch_mul_us"), 0.6, "lower"),
    ratio("attention_bf16_speed", figure("attention_torch", "bf16_us"), figure("attention_bench", "bf16_us"), 1.0, "higher"),
])
goals["gpu_actor_call_us"]["absolute_goal_us"] = 5
json.dump({"goals": goals, **steps}, open(sys.argv[2], "w"), indent=1)
# The end of the output is what a remote call returns: every step's exit status and figures, short.
for name, s in steps.items():
    print(f"{s['rc']:>3} {s['seconds']:>6}s {name}: {json.dumps(s['figures'])[:300]}")
for name, g in goals.items():
    print(f"goal {name}: troupe {g['troupe']} pytorch {g['pytorch']} ratio {g['ratio']} (goal {g['goal']}, {g['better']}) met {g['met']}")
PY
  rm -f "$out/step.txt"
  echo "device_check: figures in $out/device_check.json, log in $log"
}

case "${1:-}" in
  pack) pack "${@:2}" ;;
  run) run "${@:2}" ;;
  *) sed -n '2,20p' "$0"; exit 2 ;;
esac
