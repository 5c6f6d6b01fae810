#!/usr/bin/env bash
# Every compute loop is behind a kernel op (kernels/op.h): the layers above the kernels
# (autograd, amp, nn, optim, models, data, checkpoint, train) and the CLI call ops and contain no
# OpenMP pragma, OpenMP runtime call or SIMD intrinsic. A new one there fails this test: move the
# loop into src/kernels (a reference in ref/, the fast path in cpu/, a Backend method).
# Usage: compute_placement_test.sh SOURCE_DIR
src="${1:?usage: compute_placement_test.sh SOURCE_DIR}"
cd "$src" || exit 2
dirs=(src/autograd src/amp src/nn src/optim src/models src/data src/checkpoint src/train apps)
for d in "${dirs[@]}"; do
  [ -d "$d" ] || { echo "FAIL: $d is missing (update the list in $0)"; exit 1; }
done
pattern='#[[:space:]]*pragma[[:space:]]+omp|#[[:space:]]*include[[:space:]]*<(omp|immintrin|emmintrin|xmmintrin|pmmintrin|smmintrin|avxintrin|x86intrin)\.h>|\b_mm(256|512)?_[a-z0-9_]+\(|\bomp_[a-z_]+\('
found=$(grep -rnE "$pattern" "${dirs[@]}" --include='*.cpp' --include='*.h' || true)
if [ -n "$found" ]; then
  echo "FAIL: compute outside the backend:"
  echo "$found"
  echo "0 passed, 1 failed"
  exit 1
fi
# The check itself must see a violation: run the pattern over a sample that has one.
if ! printf '#pragma omp parallel for\n' | grep -qE "$pattern"; then
  echo "FAIL: the pattern does not match an OpenMP pragma"
  echo "0 passed, 1 failed"
  exit 1
fi
echo "1 passed, 0 failed"
