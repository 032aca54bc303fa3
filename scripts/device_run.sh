#!/usr/bin/env bash
# GPU checks on a machine that lacks our Debian libraries (oneDNN, OpenBLAS, ...): build here,
# carry the binaries and a tarball of their shared libraries, run there.
#
#   scripts/device_run.sh pack            # here: builds build-e for sm_80/sm_90, packs .devlibs/libs.tar.xz
#   scripts/device_run.sh remote          # there: unpacks, runs the [cuda] tests, all device tests, cuda_bench
#
# With the workplace's `run` tool: carry build-e/bin, build-e/lib and .devlibs, command
# `bash scripts/device_run.sh remote`. PRELOAD=/path/lib.so adds a library to preload there.
# Output goes to stdout and, when $OUT is set, to $OUT/device_run.log.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
build=${2:-build-e}

pack() {
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTROUPE_NATIVE=OFF -DCMAKE_CUDA_ARCHITECTURES="80;90" >/dev/null
  cmake --build "$build" -j2 --target test_devices cuda_bench
  # Every shared library the binaries use except glibc, the C++ runtime and CUDA (the GPU machine has those).
  mkdir -p .devlibs
  ldd "$build"/bin/test_devices "$build"/bin/cuda_bench "$build"/lib/*.so | awk '/=> \//{print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|ld-linux[^/]*)\.so' |
    grep -v "/$build/" >.devlibs/libs.txt || true
  tar -cJhf .devlibs/libs.tar.xz --transform 's,.*/,,' -T .devlibs/libs.txt
  du -ch "$build"/bin "$build"/lib .devlibs/libs.tar.xz | tail -1
}

remote() {
  local libs=/tmp/troupe-libs
  mkdir -p "$libs"
  tar -xJf .devlibs/libs.tar.xz -C "$libs"
  # cuBLAS: the toolkit's, or the one PyTorch's wheels bring.
  local cublas
  cublas=$(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null ||
    find /usr /opt -name 'libcublas.so.13' 2>/dev/null | head -1)
  export LD_LIBRARY_PATH="$libs:$(dirname "$cublas"):${LD_LIBRARY_PATH:-}"
  [[ -n "${PRELOAD:-}" ]] && export LD_PRELOAD="$PRELOAD"
  local log=${OUT:-/tmp}/device_run.log
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    echo "== cuda tests"
    "$build"/bin/test_devices "[cuda]" --durations yes || echo "cuda tests FAILED"
    echo "== all device tests"
    "$build"/bin/test_devices || echo "device tests FAILED"
    echo "== cuda_bench"
    "$build"/bin/cuda_bench --reps 20
  } 2>&1 | tee "$log"
}

case "$mode" in
  pack) pack ;;
  remote) remote ;;
  *) sed -n '2,10p' "$0"; exit 2 ;;
esac
