#!/usr/bin/env bash
# Quick start, part 1: set up, build (Release, into build/), and run the main job.
# It prints what this CPU offers, benchmarks the GEMMs (fp32 vs bf16 vs fp16, mixtrain vs oneDNN
# called directly), then compares the five precision modes on gpt-nano with the built-in corpus
# (the same model, seed and batches for each; a few minutes on 2 cores). Extra arguments go to
# `mixtrain compare` (e.g. --steps 500 --model gpt-mini).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
build/mixtrain info
build/mixtrain bench gemm --json build/bench_gemm.json
build/mixtrain compare --json build/compare.json "$@"
