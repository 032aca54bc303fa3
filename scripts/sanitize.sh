#!/usr/bin/env bash
# The test suite under a sanitizer, in a build directory of its own (CUDA off, -O1 -g1, ccache):
#
#   scripts/sanitize.sh asan [REGEX [EXCLUDE]]   AddressSanitizer + UndefinedBehaviorSanitizer -> build-asan/
#   scripts/sanitize.sh tsan [REGEX [EXCLUDE]]   ThreadSanitizer -> build-tsan/
#   scripts/sanitize.sh tsan --build-only         the build alone (troupe.sh test runs it beside
#                                                 the other tests, at the lowest priority)
#
# REGEX picks ctest tests (default: all of them for asan; those of actors/, dataflow/ and net/ for
# tsan), EXCLUDE leaves some of those out. Every finding stops its process with an error, so the test fails and ctest shows the
# report. The ranks that net tests start are this build's binaries too, sanitized alike.
# ThreadSanitizer sees no synchronisation inside the uninstrumented system libraries; the few
# reports that come from there are suppressed in scripts/tsan.supp, each entry saying why it is
# not Troupe's. A cold build takes ~25 CPU-minutes for tsan's tests here, ~40 for asan's.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-}
build_only=false
if [ "${2:-}" = --build-only ]; then
  build_only=true
  set -- "$kind"
fi
exclude=${3:-}  # a ctest regex of tests to leave out
case "$kind" in
  asan)
    flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
    regex=${2:-.}
    targets=(all)
    ;;
  tsan)
    flags="-fsanitize=thread"
    regex=${2:-'^(actors|dataflow|net):'}
    targets=()  # the test executables the regex names
    for layer in actors dataflow net; do
      [[ "$regex" == *"$layer"* ]] && targets+=("test_$layer")
    done
    [ ${#targets[@]} -gt 0 ] || targets=(all)
    ;;
  *)
    echo "usage: scripts/sanitize.sh asan|tsan [--build-only | REGEX [EXCLUDE]]" >&2
    exit 2
    ;;
esac
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true  # cache hits across clones of the tree
dir=build-$kind
# One configure and build of a directory at a time: a run waits for a build-only still going
# (troupe.sh test starts one beside the other tests).
mkdir -p "$dir"
exec {build_lock}>"$dir/.build.lock"
flock "$build_lock"
generator=()
[ -f "$dir/CMakeCache.txt" ] || generator=(-G Ninja)  # as troupe.sh: sources compile while libraries link
cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTROUPE_WITH_CUDA=OFF -DTROUPE_SANITIZER_TESTS=OFF \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_CXX_FLAGS="$flags -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" >/dev/null
cmake --build "$dir" -j"$(nproc)" --target "${targets[@]}"
flock -u "$build_lock"
$build_only && exit 0

# detect_leaks: the suite ends processes with live actors and sockets by design (rank tests kill
# ranks); a leak that grows is the chaos soak's RSS figure, not this run's.
export ASAN_OPTIONS="abort_on_error=0:halt_on_error=1:detect_leaks=0:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:report_signal_unsafe=0:suppressions=$PWD/scripts/tsan.supp"
# libgomp's barriers are not instrumented: under TSan an OpenMP worker's read of the caller's stack
# looks unordered with the caller's next write (a report with no stack to suppress). The kernels run
# on the calling thread there; the runtime's own threads are what TSan checks.
[ "$kind" = tsan ] && export TROUPE_INTRA_OP_THREADS=1
ctest --test-dir "$dir" -R "$regex" ${exclude:+-E "$exclude"} --output-on-failure -j"$(nproc)" --timeout 900
