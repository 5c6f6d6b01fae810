#!/usr/bin/env bash
# Runs the benchmarks behind bench/RESULTS.md, one after the other in one session, and keeps
# their raw output in bench/results/. Ratios (bf16 vs fp32, mixtrain vs oneDNN direct, model
# FLOP/s vs GEMM FLOP/s) are always taken within one command, so a noisy machine biases both
# sides alike. Usage: bench/run_benchmarks.sh [gemm|convert|train-nano|train-mini|curve-mini|all]
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
bash scripts/build.sh release >/dev/null
M=build/mixtrain
R=bench/results
mkdir -p "$R"
run() { [ "$what" = all ] || [ "$what" = "$1" ]; }

{ uname -srm; lscpu | grep -E 'Model name|^CPU\(s\)'; date -u; } >"$R/machine.txt"
$M info --json >"$R/info.json"

if run gemm; then
  $M bench gemm --json "$R/gemm.json" | tee "$R/gemm.txt"
fi
if run convert; then
  $M bench convert --json "$R/convert.json" | tee "$R/convert.txt"
  $M --threads 1 bench convert --json "$R/convert_1thread.json" | tee "$R/convert_1thread.txt"
fi
if run train-nano; then
  # gpt-nano learns visibly in under a minute.
  $M train --model gpt-nano --steps 300 --batch-size 16 --eval-every 50 --eval-batches 16 \
    --log-jsonl "$R/train_gpt_nano.jsonl" --json | tee "$R/train_gpt_nano.json"
fi
if run train-mini; then
  # fp32 step speed of gpt-mini (batch 16, seq 256): model FLOP/s against the GEMM rate.
  $M train --model gpt-mini --steps 20 --batch-size 16 --seq-len 256 --eval-batches 1 \
    --log-jsonl "$R/speed_gpt_mini.jsonl" --json | tee "$R/speed_gpt_mini.json"
fi
if [ "$what" = curve-mini ]; then
  # The long learning curve (hours of CPU time on 2 cores; run deliberately, not in `all`).
  $M train --model gpt-mini --steps "${STEPS:-2000}" --batch-size "${BATCH:-8}" --seq-len 256 --warmup 100 \
    --eval-every 100 --eval-batches 16 --log-jsonl "$R/curve_gpt_mini.jsonl" --json | tee "$R/curve_gpt_mini.json"
fi
