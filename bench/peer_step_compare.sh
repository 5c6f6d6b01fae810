#!/usr/bin/env bash
# mixtrain against PyTorch + transformers step for step (bench/RESULTS.md, "Fortunes, step for
# step against PyTorch"): the same fine-tune with the same random streams on both sides. The
# peer (bench/peer_finetune.py, in the development venv) writes the model as it initialised it
# (the new head included) and takes mixtrain's batch order and dropout masks; mixtrain then
# starts from that model. Prints each side's test accuracy and loss per epoch and the largest
# step-loss difference; exits 1 if an epoch's accuracy differs. 32-true, 2 threads each.
# A development tool (PyTorch is never a test dependency); accuracy does not depend on the load.
# Usage: bench/peer_step_compare.sh [MIXTRAIN] [TASK] [EPOCHS] [DROPOUT] [LR] [TRAIN_EXAMPLES]
#   e.g. bench/peer_step_compare.sh build/mixtrain fortunes 3 0.1 1e-4     (~20 min here)
#        bench/peer_step_compare.sh build/mixtrain fortunes 1 0.1 1e-4 320 (~1 min)
set -euo pipefail
MIXTRAIN="${1:-build/mixtrain}"
TASK="${2:-fortunes}"
EPOCHS="${3:-1}"
DROPOUT="${4:-0.1}"
LR="${5:-1e-4}"
TRAIN_EXAMPLES="${6:-0}"
PY="${PYTHON:-.venv-dev/bin/python}"
[ -x "$PY" ] || { echo "peer_step_compare: no $PY (make it with tools/setup_dev_venv.sh)" >&2; exit 2; }
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
export MIXTRAIN_DATA_DIR="${MIXTRAIN_DATA_DIR:-$PWD/build/data}"
COMMON=(--task "$TASK" --epochs "$EPOCHS" --batch-size 16 --max-len 128 --lr "$LR" --weight-decay 0.01
        --train-examples "$TRAIN_EXAMPLES")
"$PY" bench/peer_finetune.py "${COMMON[@]}" --threads 2 --precisions 32-true --seed 1337 --dropout "$DROPOUT" \
  --order mixtrain --dropout-rng mixtrain --save-init "$OUT/init" --log-steps "$OUT/pt.jsonl" \
  --json "$OUT/pt.json" >/dev/null 2>"$OUT/pt.err" || { tail -5 "$OUT/pt.err" >&2; exit 1; }
"$MIXTRAIN" --threads 2 finetune --model "$OUT/init" "${COMMON[@]}" --pooling cls --precision 32-true --seed 1337 \
  --dropout "$DROPOUT" --log-jsonl "$OUT/mx.jsonl" --json "$OUT/mx.json" >/dev/null
python3 - "$OUT" <<'PY'
import json, sys
d = sys.argv[1]
pt = [json.loads(l) for l in open(f"{d}/pt.jsonl")]
mx = [j for j in (json.loads(l) for l in open(f"{d}/mx.jsonl")) if "grad_norm" in j]
assert len(pt) == len(mx), (len(pt), len(mx))
diff = max(abs(p["loss"] - m["loss"]) for p, m in zip(pt, mx))
pe = json.load(open(f"{d}/pt.json"))["runs"][0]["epochs"]
me = json.load(open(f"{d}/mx.json"))["epochs"]
same = True
for p, m in zip(pe, me):
    same = same and p["test_accuracy"] == m["test_accuracy"]
    print(f"epoch {p['epoch']}: test accuracy PyTorch {100 * p['test_accuracy']:.2f}%, mixtrain "
          f"{100 * m['test_accuracy']:.2f}%; test loss {p['test_loss']:.6f} / {m['test_loss']:.6f}")
print(f"{len(pt)} steps: largest step-loss difference {diff:.3g}")
sys.exit(0 if same else 1)
PY
