#!/usr/bin/env bash
# mixtrain vs PyTorch on the same machine, back to back: `mixtrain bench train` for 32-true and
# bf16-mixed, then bench/peer_pytorch.py with the same model, batch, sequence length, threads and
# step counts; prints the tokens/s of each and the ratios. Run on an idle machine.
#   bench/peer_compare.sh [MODEL] [BATCH] [SEQ] [THREADS] [STEPS]     (default gpt-mini 16 256 2 8)
#   PYTHON: the interpreter with torch (default: .venv-dev/bin/python from tools/setup_dev_venv.sh)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
model="${1:-gpt-mini}" batch="${2:-16}" seq="${3:-256}" threads="${4:-2}" steps="${5:-8}"
python="${PYTHON:-$repo/.venv-dev/bin/python}"
out="$repo/build/peer"
mkdir -p "$out"
for p in 32-true bf16-mixed; do
  "$repo/build/mixtrain" --threads "$threads" bench train --model "$model" --precision "$p" --batch-size "$batch" \
    --seq-len "$seq" --steps $((steps + 2)) --profile-warmup 2 --json "$out/mixtrain-$p.json" >/dev/null
done
"$python" "$repo/bench/peer_pytorch.py" --model "$model" --batch-size "$batch" --seq-len "$seq" --threads "$threads" \
  --steps "$steps" --warmup-steps 2 --json "$out/pytorch.json" >/dev/null
python3 - "$out" <<'PY'
import json, sys
d = sys.argv[1]
m = {p: json.load(open(f"{d}/mixtrain-{p}.json")) for p in ("32-true", "bf16-mixed")}
t = json.load(open(f"{d}/pytorch.json"))
tp = {r["precision"]: r["tokens_per_s"] for r in t["runs"]}
print(f"torch {t['torch_version']}, {t['threads']} threads, {t['config']['model']} B{t['config']['batch_size']} T{t['config']['seq_len']}")
print(f"{'precision':<11} {'mixtrain tok/s':>15} {'pytorch tok/s':>14} {'ratio':>7}")
for p in ("32-true", "bf16-mixed"):
    mt = m[p]["tokens_per_s"]
    print(f"{p:<11} {mt:>15.0f} {tp[p]:>14.0f} {mt / tp[p]:>6.2f}x")
print(f"mixtrain bf16-mixed / 32-true: {m['bf16-mixed']['tokens_per_s'] / m['32-true']['tokens_per_s']:.2f}x; "
      f"pytorch: {tp['bf16-mixed'] / tp['32-true']:.2f}x")
PY
