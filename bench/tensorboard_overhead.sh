#!/usr/bin/env bash
# What `--tensorboard DIR` costs: `bench train` with and without it, alternating in one run
# (without, with, without, with, ...) ROUNDS times so that drift on a shared machine hits both
# alike, then the median tokens/s of each side and the ratio. The issue's goal: < 1% slower.
#   bench/tensorboard_overhead.sh [BINARY] [ROUNDS] [MODEL] [STEPS]
# gpt-nano (the main job's model, where a step is shortest and the writer's share largest) by
# default; 2 threads, bf16-mixed.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-build/mixtrain}"
rounds="${2:-5}"
model="${3:-gpt-nano}"
steps="${4:-40}"
export MIXTRAIN_DATA_DIR="${MIXTRAIN_DATA_DIR:-$(pwd)/build/data}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$rounds"); do
  for side in off on; do
    extra=()
    [ "$side" = on ] && extra=(--tensorboard "$tmp/tb-$r")
    "$bin" --threads 2 bench train --model "$model" --precision bf16-mixed --steps "$steps" \
      --json "$tmp/$side.$r.json" "${extra[@]}" >/dev/null
  done
done
python3 - "$tmp" "$rounds" "$model" "$steps" <<'PY'
import json, statistics, sys
tmp, rounds, model, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def tok(path):
    j = json.load(open(path))
    runs = j["runs"] if isinstance(j, dict) and "runs" in j else [j]
    return runs[0]["tokens_per_s"]
off = [tok(f"{tmp}/off.{r}.json") for r in range(1, rounds + 1)]
on = [tok(f"{tmp}/on.{r}.json") for r in range(1, rounds + 1)]
mo, mn = statistics.median(off), statistics.median(on)
print(f"{model}, bf16-mixed, {steps} steps, 2 threads, {rounds} rounds alternating")
print(f"without --tensorboard: median {mo:.0f} tokens/s   per round: " + " ".join(f"{x:.0f}" for x in off))
print(f"with    --tensorboard: median {mn:.0f} tokens/s   per round: " + " ".join(f"{x:.0f}" for x in on))
print(f"with / without: {mn / mo:.4f} ({100 * (mn / mo - 1):+.2f}%)")
PY
