#!/usr/bin/env bash
# Two builds side by side: `bench train` (gpt-mini, batch 16, seq 256, 8 steps, 2 threads) for
# 32-true and bf16-mixed, alternating A and B ROUNDS times so drift on a shared machine hits both
# alike, then the median tokens/s of each and the ratio B/A. For "no slower than before" checks:
#   bench/ab_bench_train.sh OLD/build/mixtrain build/mixtrain [ROUNDS]
# WORKLOAD=finetune runs the MiniLM fine-tune instead (the built-in all-MiniLM-L6-v2 on Fine Foods,
# batch 16, max length 128, STEPS optimizer steps (default 40) and one test batch; training
# tokens/s: non-pad tokens over the time in training steps):
#   WORKLOAD=finetune bench/ab_bench_train.sh OLD/build/mixtrain build/mixtrain [ROUNDS] [STEPS]
# Run it on an idle machine (nothing else building or testing).
set -euo pipefail
a="${1:?usage: ab_bench_train.sh A_BINARY B_BINARY [ROUNDS] [STEPS]}"
b="${2:?usage: ab_bench_train.sh A_BINARY B_BINARY [ROUNDS] [STEPS]}"
rounds="${3:-3}"
workload="${WORKLOAD:-gpt}"
cd "$(dirname "$0")/.."
export MIXTRAIN_DATA_DIR="${MIXTRAIN_DATA_DIR:-$(pwd)/build/data}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "A: $a"
echo "B: $b"
echo "workload: $workload"
for p in 32-true bf16-mixed; do
  for r in $(seq 1 "$rounds"); do
    for side in a b; do
      bin=$a
      [ "$side" = b ] && bin=$b
      if [ "$workload" = finetune ]; then
        "$bin" --threads 2 finetune --task finefoods --precision "$p" --steps "${4:-40}" --eval-batches 1 \
          --json "$tmp/$p.$side.$r.json" >/dev/null
      else
        "$bin" --threads 2 bench train --model gpt-mini --precision "$p" --batch-size 16 --seq-len 256 --steps 8 \
          --json "$tmp/$p.$side.$r.json" >/dev/null
      fi
    done
  done
done
python3 - "$tmp" "$rounds" <<'PY'
import json, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
def tok(path):
    j = json.load(open(path))
    runs = j["runs"] if isinstance(j, dict) and "runs" in j else [j]
    return runs[0]["tokens_per_s"]
print(f"{'mode':<12}{'A tok/s':>12}{'B tok/s':>12}{'B/A':>8}   per round (A, B)")
for p in ("32-true", "bf16-mixed"):
    A = [tok(f"{tmp}/{p}.a.{r}.json") for r in range(1, rounds + 1)]
    B = [tok(f"{tmp}/{p}.b.{r}.json") for r in range(1, rounds + 1)]
    ma, mb = statistics.median(A), statistics.median(B)
    rounds_txt = "  ".join(f"({x:.0f}, {y:.0f})" for x, y in zip(A, B))
    print(f"{p:<12}{ma:>12.0f}{mb:>12.0f}{mb / ma:>8.3f}   {rounds_txt}")
PY
