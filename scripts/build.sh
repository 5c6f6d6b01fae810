#!/usr/bin/env bash
# Configures and builds mixtrain. Usage: scripts/build.sh [release|asan] [TARGET...]
#   TARGET...: build only these (e.g. `smoke`: the CLI, the benchmarks and the smoke tests'
#              programs, what scripts/fresh_machine_test.sh builds); default: everything
#   release (default): build/        (Release, -O3; build/mixtrain is the CLI)
#   asan:              build-asan/   (AddressSanitizer + UndefinedBehaviorSanitizer, -O2 -g1: a quarter
#                                    less compile time than -O2 -g, line tables being all a sanitizer
#                                    report needs; -O2, not -O1, so that float loops are vectorised and
#                                    contracted as in the release build; the CLI and the test programs
#                                    at -O1: CMakeLists.txt says why)
# Both with warnings as errors (-Werror, MIXTRAIN_WERROR): the tree builds clean with g++ 12.
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-release}"
shift || true
targets=()
for t in "$@"; do targets+=(--target "$t"); done
# The cores, not the OpenMP thread count: nproc honours OMP_NUM_THREADS, which scripts/test.sh
# sets to 1 for ctest (with it, CI compiled on one core of two).
jobs="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"
GEN=()
if command -v ninja >/dev/null 2>&1; then GEN=(-G Ninja); fi
# ccache (scripts/setup.sh installs it), when present: a rebuild after a change, a second build
# directory of the same kind, or scripts/fresh_machine_test.sh's build in an empty root (which
# shares the host's cache) compiles only what differs. Paths under the checkout are hashed relative
# to it, so that clones in other directories share release entries (the sanitizer build's, with
# line tables, also key on the build directory); the compiler and every header are part of the key
# (a missing or changed header is a miss, and then a real compile). MIXTRAIN_NO_CCACHE=1: not.
LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER= -DCMAKE_C_COMPILER_LAUNCHER=)
if command -v ccache >/dev/null 2>&1 && [ "${MIXTRAIN_NO_CCACHE:-0}" != "1" ]; then
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$(pwd)"
fi
case "$kind" in
  release)
    dir=build
    [ -f "$dir/CMakeCache.txt" ] && GEN=()  # keep the generator an existing build was made with
    cmake -S . -B "$dir" "${GEN[@]}" "${LAUNCHER[@]}" -DCMAKE_BUILD_TYPE=Release -DMIXTRAIN_WERROR=ON >/dev/null ;;
  asan)
    dir=build-asan
    [ -f "$dir/CMakeCache.txt" ] && GEN=()
    cmake -S . -B "$dir" "${GEN[@]}" "${LAUNCHER[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
      -DMIXTRAIN_SANITIZE=ON -DMIXTRAIN_WERROR=ON >/dev/null ;;
  *) echo "build.sh: unknown build kind '$kind' (valid: release, asan)" >&2; exit 2 ;;
esac
cmake --build "$dir" -j "$jobs" "${targets[@]}"
