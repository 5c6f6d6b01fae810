#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (build-fuzz/, ASan + UBSan + fuzzer coverage) and runs
# each for a bounded time from the committed seed corpus. Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
#   SECONDS (default 60) per target; targets: safetensors_fuzz training_state_fuzz config_fuzz text_fuzz
#   report_fuzz vocab_fuzz encoder_config_fuzz.
# New corpus entries go to build-fuzz/corpus/<target>/ (the committed fuzz/corpus/ is only read);
# a crash leaves its input in build-fuzz/ and makes this script exit non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(safetensors_fuzz training_state_fuzz config_fuzz text_fuzz report_fuzz vocab_fuzz
  encoder_config_fuzz)
GEN=()
if command -v ninja >/dev/null 2>&1 && [ ! -f build-fuzz/CMakeCache.txt ]; then GEN=(-G Ninja); fi
# -O1 -g1: half the compile time of -O2 -g (libFuzzer's usual -O1); line tables are all a finding's
# stack needs.
CC=clang CXX=clang++ cmake -S . -B build-fuzz "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMIXTRAIN_FUZZ=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DMIXTRAIN_BUILD_TESTS=OFF -DMIXTRAIN_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz -j "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" --target "${targets[@]}"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
for t in "${targets[@]}"; do
  corpus="${t%_fuzz}"
  mkdir -p "build-fuzz/corpus/$corpus"
  echo "fuzz: $t for ${seconds}s"
  (cd build-fuzz && "./fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 "corpus/$corpus" "../fuzz/corpus/$corpus" 2>&1 | tail -n 12 | grep -E "stat::number_of_executed_units|Done|ERROR|SUMMARY" || true)
  # libFuzzer exits non-zero on a finding; rerun the status check without the pipe's masking.
  if ls build-fuzz/crash-* build-fuzz/leak-* build-fuzz/timeout-* build-fuzz/oom-* >/dev/null 2>&1; then
    echo "fuzz: $t found a problem; inputs: $(ls build-fuzz/crash-* build-fuzz/leak-* build-fuzz/timeout-* build-fuzz/oom-* 2>/dev/null)"
    exit 1
  fi
done
