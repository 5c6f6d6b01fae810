#!/usr/bin/env bash
# Runs the benchmarks behind bench/RESULTS.md, one after the other in one session, and keeps
# their raw output in bench/results/. Ratios (bf16 vs fp32, mixtrain vs oneDNN direct, model
# FLOP/s vs GEMM FLOP/s) are always taken within one command, so a noisy machine biases both
# sides alike. Usage: bench/run_benchmarks.sh
#   [gemm|convert|train-nano|train-mini|precisions|bench-train|peer|gpt2-small|curve-mini|accuracy|predict-scaling|all]
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

if run predict-scaling; then
  # `memory --predict-only` time against the number of layers (gpt-nano's width, batch 4, T 128):
  # it must grow linearly.
  cfg="$(mktemp --suffix=.json)"
  for L in 128 256 512 1024 2048 4096; do
    echo "{\"n_layer\": $L, \"n_head\": 4, \"n_embd\": 128, \"block_size\": 128}" >"$cfg"
    s=$EPOCHREALTIME
    $M memory --model "$cfg" --batch-size 4 --seq-len 128 --predict-only >/dev/null
    awk -v l="$L" -v a="$s" -v b="$EPOCHREALTIME" 'BEGIN { printf "layers %5d  predict-only %.2f s\n", l, b - a }'
  done | tee "$R/predict_scaling.txt"
  rm -f "$cfg"
fi
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
if run precisions; then
  # Every precision mode side by side (speed, memory by category) at gpt-mini batch 16, seq 256.
  $M compare --model gpt-mini --batch-size 16 --seq-len 256 --steps 8 --eval-batches 2 \
    --json "$R/compare_gpt_mini_b16.json" | tee "$R/compare_gpt_mini_b16.txt"
  $M compare --model gpt-mini --batch-size 16 --seq-len 256 --steps 8 --eval-batches 2 --checkpoint-activations \
    --precisions 32-true,bf16-mixed,bf16-true --json "$R/compare_gpt_mini_b16_ckpt.json" |
    tee "$R/compare_gpt_mini_b16_ckpt.txt"
fi
if run bench-train; then
  # Steady-state step speed and where the time goes (first 2 steps left out), with and without
  # activation checkpointing; thread scaling of bf16-mixed.
  for p in 32-true bf16-mixed; do
    $M bench train --model gpt-mini --precision $p --batch-size 16 --seq-len 256 --steps 8 \
      --json "$R/bench_train_$p.json" | tee "$R/bench_train_$p.txt"
    $M bench train --model gpt-mini --precision $p --batch-size 16 --seq-len 256 --steps 8 --checkpoint-activations \
      --json "$R/bench_train_${p}_ckpt.json" | tee "$R/bench_train_${p}_ckpt.txt"
  done
  $M bench train --model gpt-mini --precision bf16-mixed --batch-size 16 --seq-len 256 --steps 6 --thread-scaling \
    --json "$R/bench_train_scaling.json" | tee "$R/bench_train_scaling.txt"
fi
if run peer; then
  # mixtrain vs PyTorch (bench/peer_pytorch.py; PYTHON: an interpreter with torch).
  bench/peer_compare.sh gpt-mini 16 256 2 6 | tee "$R/peer_gpt_mini.txt"
  cp build/peer/*.json "$R/" 2>/dev/null || true
fi
if run gpt2-small; then
  # A gpt2-small (124M) step in bf16-mixed with checkpointing at batch 8, seq 1024: the memory.
  $M train --model gpt2-small --precision bf16-mixed --checkpoint-activations --batch-size 8 --seq-len 1024 \
    --steps 2 --eval-batches 1 --json | tee "$R/gpt2_small_b8_t1024.json"
fi
if [ "$what" = accuracy ]; then
  # The 2000-step accuracy comparison of the precision modes (about an hour of the whole machine).
  $M compare --model gpt-mini --steps 2000 --batch-size 8 --seq-len 128 --warmup 100 --eval-every 250 \
    --eval-batches 16 --precisions 32-true,bf16-mixed,bf16-true:kahan,16-mixed,bf16-true:nearest,16-true,bf16-true:stochastic \
    --log-jsonl "$R/accuracy.jsonl" --json "$R/accuracy.json" | tee "$R/accuracy.txt"
fi
if [ "$what" = curve-mini ]; then
  # The long learning curve (hours of CPU time on 2 cores; run deliberately, not in `all`).
  $M train --model gpt-mini --steps "${STEPS:-2000}" --batch-size "${BATCH:-8}" --seq-len 256 --warmup 100 \
    --eval-every 100 --eval-batches 16 --log-jsonl "$R/curve_gpt_mini.jsonl" --json | tee "$R/curve_gpt_mini.json"
fi
