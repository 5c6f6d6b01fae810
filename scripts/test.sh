#!/usr/bin/env bash
# Quick start, part 2: set up, build, and run every test:
#   1. Release build, the whole suite (including the tests labelled "slow": exhaustive 2^32 checks
#      and the golden step logs);
#   2. AddressSanitizer + UndefinedBehaviorSanitizer build, every test but the "slow" ones
#      (the exhaustive loops would take hours under ASan and are pure integer conversions; the
#      golden runs are the training loop the other tests run, compared only within tolerance in a
#      build compiled otherwise). Both sanitizers instrument the library and the CLI; the test
#      programs' own scaffolding is instrumented by ASan only (CMakeLists.txt, tests/CMakeLists.txt
#      say why: compile time on 2 cores);
#   3. the libFuzzer targets for MIXTRAIN_FUZZ_SECONDS (default 10) each (MIXTRAIN_SKIP_FUZZ=1: not):
#      seven targets, ~1.2 min after the fuzz build (the readers instrumented, the compute plain),
#      bounded so that CI stays near 45 minutes (from the committed seed corpus; longer runs:
#      scripts/fuzz.sh SECONDS).
# Any failure (a test or a sanitizer report) exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash tools/setup_dev_venv.sh --test  # the Python readers some tests check output with (tensorboard)
jobs="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"  # cores (nproc honours OMP_NUM_THREADS)
# ctest runs $jobs tests at once, each at one OpenMP thread: at nproc threads each, libgomp's
# spinning barriers fight over the cores (a 4.5 s test took 29 s beside a copy of itself; the suite
# ran 1.8x slower in release, 1.6x under ASan). The kernels' agreement across thread counts is
# still tested: OpThreads and the --threads cases set their count themselves.
export OMP_NUM_THREADS=1

bash scripts/build.sh release
ctest --test-dir build --output-on-failure -j "$jobs"

if [ "${MIXTRAIN_SKIP_SANITIZE:-0}" != "1" ]; then
  bash scripts/build.sh asan
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:halt_on_error=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE slow
fi

# 3. A bounded libFuzzer run of the readers of untrusted input (fuzz/README.md).
if [ "${MIXTRAIN_SKIP_FUZZ:-0}" != "1" ]; then
  bash scripts/fuzz.sh "${MIXTRAIN_FUZZ_SECONDS:-10}"
fi
