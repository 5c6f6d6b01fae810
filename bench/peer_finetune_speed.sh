#!/usr/bin/env bash
# mixtrain against PyTorch + transformers on the same fine-tune, side by side: ROUNDS rounds, each
# running `mixtrain compare --task finefoods` (32-true, bf16-mixed) and then bench/peer_finetune.py
# (fp32, autocast bf16) on the first TRAIN_EXAMPLES Fine Foods reviews (one epoch of batch 16,
# max length 128, lr 5e-5, CLS pooler head, 2 threads), so drift on a shared machine hits both
# alike; then the median non-pad tokens/s of each run and the ratios the fine-tune issue's goals
# name (bf16-mixed / 32-true, mixtrain / PyTorch).
#   bench/peer_finetune_speed.sh [BINARY] [ROUNDS] [TRAIN_EXAMPLES]
# PYTHON: the interpreter with torch and transformers (default .venv-dev/bin/python, made by
# tools/setup_dev_venv.sh). Run it on an idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-build/mixtrain}"
rounds="${2:-3}"
n="${3:-480}"
python="${PYTHON:-.venv-dev/bin/python}"
export MIXTRAIN_DATA_DIR="${MIXTRAIN_DATA_DIR:-$(pwd)/build/data}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
common=(--task finefoods --train-examples "$n" --test-examples 96 --max-len 128 --batch-size 16 --lr 5e-5)
for r in $(seq 1 "$rounds"); do
  "$bin" --threads 2 compare "${common[@]}" --precisions 32-true,bf16-mixed --json "$tmp/mt.$r.json" >/dev/null
  "$python" bench/peer_finetune.py "${common[@]}" --threads 2 --json "$tmp/pt.$r.json" >/dev/null 2>"$tmp/pt.$r.err" ||
    { cat "$tmp/pt.$r.err" >&2; exit 1; }
done
python3 - "$tmp" "$rounds" "$n" <<'PY'
import json, statistics, sys
tmp, rounds, n = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def runs(path):
    j = json.load(open(path))
    return {r["precision"]: r["tokens_per_s"] for r in j["runs"]}
mt = [runs(f"{tmp}/mt.{r}.json") for r in range(1, rounds + 1)]
pt = [runs(f"{tmp}/pt.{r}.json") for r in range(1, rounds + 1)]
med = {}
print(f"Fine Foods, first {n} reviews, {rounds} rounds; non-pad tokens/s per round")
for name, rs in (("mixtrain", mt), ("pytorch", pt)):
    for p in ("32-true", "bf16-mixed"):
        vals = [x[p] for x in rs]
        med[(name, p)] = statistics.median(vals)
        print(f"  {name:9}{p:12}median {med[(name, p)]:8.0f}   " + " ".join(f"{v:.0f}" for v in vals))
print(f"mixtrain bf16-mixed / 32-true: {med[('mixtrain', 'bf16-mixed')] / med[('mixtrain', '32-true')]:.2f}x")
print(f"pytorch  bf16 / fp32:          {med[('pytorch', 'bf16-mixed')] / med[('pytorch', '32-true')]:.2f}x")
print(f"mixtrain / pytorch, 32-true:   {med[('mixtrain', '32-true')] / med[('pytorch', '32-true')]:.2f}x")
print(f"mixtrain / pytorch, bf16:      {med[('mixtrain', 'bf16-mixed')] / med[('pytorch', 'bf16-mixed')]:.2f}x")
PY
