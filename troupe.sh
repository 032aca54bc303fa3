#!/usr/bin/env bash
# Set-up, build and run Troupe on Debian 12 in one step.
#   ./troupe.sh tour   install what is missing, build into build/, run the model tour
#   ./troupe.sh test   install what is missing, build into build/, run every test
set -euo pipefail
cd "$(dirname "$0")"

packages=(build-essential cmake ninja-build ccache pkg-config libcaf-dev libzmq3-dev cppzmq-dev libsodium-dev libssl-dev catch2 libdnnl-dev
          libopenblas-dev nlohmann-json3-dev libcli11-dev zlib1g-dev dataset-fashion-mnist
          libsentencepiece-dev sentencepiece openmpi-bin slurm-wlm munge clang-14 libclang-rt-14-dev
          python3-prometheus-client tmux)

install_missing() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  echo "troupe.sh: installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
}

build() {
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true  # cache hits across clones of the tree
  # Ninja compiles a target's sources while the libraries it links are still being built (make
  # waits for them); a build/ made before keeps the generator it was made with.
  local generator=()
  [ -f build/CMakeCache.txt ] || generator=(-G Ninja)
  cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j"$(nproc)"
}

case "${1:-}" in
  tour)
    install_missing
    build
    examples/tour.sh
    ;;
  test)
    # The parts' times, last: a CI log keeps the end of what it printed.
    trap 'echo "troupe.sh test: set-up ${set_up_s:-?} s, build ${build_s:-?} s, tests $((SECONDS - ${tests_from:-SECONDS})) s (all but TSan ${others_s:-?} s, then TSan build waited for ${tsan_wait_s:-?} s) ($(nproc) cores)"' EXIT
    install_missing
    set_up_s=$SECONDS
    build
    build_s=$((SECONDS - set_up_s))
    tests_from=$SECONDS
    # The ThreadSanitizer test's build (build-tsan/) compiles at the lowest priority while the
    # other tests run: waiting on sockets, processes and timeouts, they leave about a third of the
    # CPUs idle. The TSan test itself runs last, alone; it waits for that build if still going.
    tsan=(-R '^sanitize: tsan')
    nice -n 19 scripts/sanitize.sh tsan --build-only >build/tsan-build.log 2>&1 &
    tsan_build=$!
    status=0
    ctest --test-dir build --output-on-failure -j"$(nproc)" -E "${tsan[1]}" || status=$?
    cp build/Testing/Temporary/LastTest.log build/tests.log  # the TSan step's ctest writes over it
    others_s=$((SECONDS - tests_from))
    wait "$tsan_build" || { cat build/tsan-build.log; status=1; }
    tsan_wait_s=$((SECONDS - tests_from - others_s))
    ctest --test-dir build --output-on-failure -j"$(nproc)" "${tsan[@]}" || status=$?
    [ "$status" -eq 0 ] || scripts/failed_tests.sh build/tests.log build-tsan/Testing/Temporary/LastTest.log
    exit "$status"
    ;;
  *)
    echo "usage: ./troupe.sh tour|test" >&2
    exit 2
    ;;
esac
