#!/usr/bin/env bash
# Configures and builds mixtrain. Usage: scripts/build.sh [release|asan]
#   release (default): build/        (Release, -O3; build/mixtrain is the CLI)
#   asan:              build-asan/   (AddressSanitizer + UndefinedBehaviorSanitizer, -O1 -g1: half the
#                                    compile time of -O2 -g; line tables are all a sanitizer report needs)
# Both with warnings as errors (-Werror, MIXTRAIN_WERROR): the tree builds clean with g++ 12.
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-release}"
jobs="$(nproc)"
GEN=()
if command -v ninja >/dev/null 2>&1; then GEN=(-G Ninja); fi
case "$kind" in
  release)
    dir=build
    [ -f "$dir/CMakeCache.txt" ] && GEN=()  # keep the generator an existing build was made with
    cmake -S . -B "$dir" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DMIXTRAIN_WERROR=ON >/dev/null ;;
  asan)
    dir=build-asan
    [ -f "$dir/CMakeCache.txt" ] && GEN=()
    cmake -S . -B "$dir" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
      -DMIXTRAIN_SANITIZE=ON -DMIXTRAIN_WERROR=ON >/dev/null ;;
  *) echo "build.sh: unknown build kind '$kind' (valid: release, asan)" >&2; exit 2 ;;
esac
cmake --build "$dir" -j "$jobs"
