#!/usr/bin/env bash
# Troupe as an outside project sees it: installs the build tree into a temporary prefix, builds the
# README's C++ blocks there through find_package(troupe) alone (outside/CMakeLists.txt), and runs
# them as the README says: the plain blocks as they are, the ones whose main() names a
# `troupe launch` line (the remote actors on 2 ranks, the all_reduce) under the installed
# `troupe launch`. The restart example (--max-restarts) is built, not run: it trains 1000 steps,
# ~2.5 minutes on 2 busy cores. Nothing from the build tree is on any path while they build or run.
#
#   tests/install/install_test.sh BUILD_DIR SOURCE_DIR      # ctest: "install: ..."
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/troupe-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
outside=$work/outside

cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; exit 1; }
[ -x "$prefix/bin/troupe" ] || { echo "install: no bin/troupe under the prefix" >&2; exit 1; }

# One base for ccache: the same relative paths every run, so a second run compiles nothing.
export CCACHE_BASEDIR=$work CCACHE_NOHASHDIR=true
unset LD_LIBRARY_PATH CPATH LIBRARY_PATH
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$src/tests/install/outside" -B "$outside" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DTROUPE_SOURCE_DIR="$src" "${launcher[@]}" >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$outside" -j"$(nproc)" >"$work/build.log" 2>&1 || { tail -n 60 "$work/build.log"; exit 1; }

mkdir "$work/run"
cd "$work/run"
remote_actors=0
while read -r n how options; do
  program=$outside/readme_example_$n
  started=$SECONDS
  case $how in
    run) timeout 300 "$program" >"$work/out" 2>&1 || { cat "$work/out"; echo "README block $n failed" >&2; exit 1; } ;;
    launch)
      [[ $options == *--max-restarts* ]] && { echo "README block $n: built (trains 1000 steps: not run here)"; continue; }
      # shellcheck disable=SC2086  # the README's options, word by word
      timeout 300 "$prefix/bin/troupe" launch $options -- "$program" >"$work/out" 2>&1 ||
        { cat "$work/out"; echo "README block $n under troupe launch $options failed" >&2; exit 1; }
      grep -q spawn_on "$outside/readme_example_$n.cpp" && remote_actors=$((remote_actors + 1))
      ;;
    *) echo "README block $n: built (compile-only)"; continue ;;
  esac
  echo "README block $n: ran ($how${options:+ $options}, $((SECONDS - started)) s)"
done <"$outside/programs.txt"
[ "$remote_actors" -ge 1 ] || { echo "install: no README block spawned remote actors on 2 ranks" >&2; exit 1; }
echo "install: the README's blocks built and ran against $prefix through find_package(troupe)"
