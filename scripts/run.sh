#!/usr/bin/env bash
# Quick start, part 1: set up, build (Release, into build/), and run the main job.
# The main job today is the GEMM benchmark (fp32 vs bf16 vs fp16 through mixtrain and through
# oneDNN directly); later it becomes the precision comparison.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
build/mixtrain info
build/mixtrain bench gemm --json build/bench_gemm.json "$@"
