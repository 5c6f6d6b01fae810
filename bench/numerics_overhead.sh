#!/usr/bin/env bash
# What the numerics probes cost: `bench train` without probes, with `--numerics-every 50` (the
# issue's goal: <= 3% of tokens/s) and with `--numerics-every 1` (every step probed: the price of
# one sampled step), alternating in one run ROUNDS times so that drift on a shared machine hits
# every side alike; then the median tokens/s of each side and the ratios.
#   bench/numerics_overhead.sh [BINARY] [ROUNDS] [MODEL] [STEPS] [PRECISION]
# Defaults: gpt-mini, 101 steps (sampled steps 1, 51, 101; bench train leaves its 2 warm-up steps
# out), 16-mixed, 2 threads. Run it on a quiet machine: on a shared one other jobs move tokens/s
# by more than the effect.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-build/mixtrain}"
rounds="${2:-5}"
model="${3:-gpt-mini}"
steps="${4:-101}"
precision="${5:-16-mixed}"
export MIXTRAIN_DATA_DIR="${MIXTRAIN_DATA_DIR:-$(pwd)/build/data}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$rounds"); do
  for side in off every50 every1; do
    extra=()
    [ "$side" = every50 ] && extra=(--numerics "$tmp/n50-$r.jsonl" --numerics-every 50)
    [ "$side" = every1 ] && extra=(--numerics "$tmp/n1-$r.jsonl" --numerics-every 1)
    "$bin" --threads 2 bench train --model "$model" --precision "$precision" --steps "$steps" \
      --json "$tmp/$side.$r.json" "${extra[@]}" >/dev/null
  done
done
python3 - "$tmp" "$rounds" "$model" "$steps" "$precision" <<'PY'
import json, statistics, sys
tmp, rounds, model, steps, precision = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def tok(path):
    j = json.load(open(path))
    runs = j["runs"] if isinstance(j, dict) and "runs" in j else [j]
    return runs[0]["tokens_per_s"]
side = {s: [tok(f"{tmp}/{s}.{r}.json") for r in range(1, rounds + 1)] for s in ("off", "every50", "every1")}
med = {s: statistics.median(v) for s, v in side.items()}
print(f"{model}, {precision}, {steps} steps, 2 threads, {rounds} rounds alternating")
for s, label in (("off", "no probes           "), ("every50", "--numerics-every 50 "), ("every1", "--numerics-every 1  ")):
    print(f"{label}: median {med[s]:.0f} tokens/s   per round: " + " ".join(f"{x:.0f}" for x in side[s]))
for s in ("every50", "every1"):
    print(f"{s} / off: {med[s] / med['off']:.4f} ({100 * (med[s] / med['off'] - 1):+.2f}%)")
PY
