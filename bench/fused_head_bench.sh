#!/usr/bin/env bash
# The fused LM head (--fused-lm-head, autograd::lm_head_loss) against the unfused matmul +
# cross_entropy, side by side: `bench train` on gpt-mini's shape with a V-token vocabulary (the
# built-in byte corpus; only the head's size matters here), batch 16, seq 256, 2 threads, each mode
# alternating unfused and fused ROUNDS times; medians, the ratio and its spread over the rounds, and
# each side's tracked peak (`mixtrain memory --fused-lm-head` breaks it down). MODES (default
# "bf16-mixed 32-true") picks the precision modes. Run it on an idle machine:
#   [MODES="32-true 16-mixed bf16-mixed 16-true bf16-true"] bench/fused_head_bench.sh [ROUNDS] [V]
set -euo pipefail
rounds="${1:-5}"
vocab="${2:-16384}"
cd "$(dirname "$0")/.."
export MIXTRAIN_DATA_DIR="${MIXTRAIN_DATA_DIR:-$(pwd)/build/data}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "{\"n_layer\": 6, \"n_head\": 6, \"n_embd\": 384, \"block_size\": 256, \"vocab_size\": $vocab}" >"$tmp/model.json"
lscpu | sed -n 's/^Model name: *//p;s/^Model: *//p' | paste -sd' '
modes="${MODES:-bf16-mixed 32-true}"
for p in $modes; do
  for r in $(seq 1 "$rounds"); do
    for side in unfused fused; do
      flag=()
      [ "$side" = fused ] && flag=(--fused-lm-head)
      build/mixtrain --threads 2 bench train --model "$tmp/model.json" --precision "$p" --batch-size 16 --seq-len 256 \
        --steps 8 "${flag[@]}" --json "$tmp/$p.$side.$r.json" >/dev/null
    done
  done
done
python3 - "$tmp" "$rounds" "$vocab" $modes <<'PY'
import json, statistics, sys
tmp, rounds, vocab, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
def run(path):
    j = json.load(open(path))
    return j["runs"][0] if isinstance(j, dict) and "runs" in j else j
print(f"gpt-mini shape, V = {vocab}, batch 16, seq 256, 2 threads, {rounds} alternating rounds")
print(f"{'mode':<12}{'unfused tok/s':>14}{'fused tok/s':>13}{'ratio':>7}{'round ratios':>16}{'peak MiB u/f':>16}")
for p in modes:
    U = [run(f"{tmp}/{p}.unfused.{r}.json") for r in range(1, rounds + 1)]
    F = [run(f"{tmp}/{p}.fused.{r}.json") for r in range(1, rounds + 1)]
    tu, tf = [u["tokens_per_s"] for u in U], [f["tokens_per_s"] for f in F]
    ratios = sorted(b / a for a, b in zip(tu, tf))
    spread = "%.3f-%.3f" % (ratios[0], ratios[-1])
    peaks = "%.1f/%.1f" % (U[0]["peak_bytes"] / 2**20, F[0]["peak_bytes"] / 2**20)
    print(f"{p:<12}{statistics.median(tu):>14.0f}{statistics.median(tf):>13.0f}"
          f"{statistics.median(tf) / statistics.median(tu):>7.3f}{spread:>16}{peaks:>16}")
PY
