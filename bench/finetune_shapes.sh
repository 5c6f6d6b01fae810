#!/usr/bin/env bash
# bf16-mixed against 32-true, speed and peak memory, as the encoder's width grows: all-MiniLM-L6-v2
# (hidden 384, the issue's model), and randomly initialised DistilBERT-base (hidden 768, 6 layers:
# the reference experiment's model) and BERT-base (hidden 768, 12 layers) shapes with MiniLM's
# tokenizer, so every model sees the same batches. Fine Foods, batch 16, max length 128, 2 threads.
# For a quiet machine: the figures are meaningless while other work shares the cores.
#
# Speed: ROUNDS rounds, each running every (model, mode) in turn with `finetune --steps S
# --profile 2` (the steps after the first two timed, by kind of work); medians of tokens/s and of
# the GEMM milliseconds per step. Memory: `finetune --predict-memory` (exact: the tests check it
# against the measured peak) for 32-true, bf16-mixed and bf16-true at batch 16 and 64.
#
# Usage: bench/finetune_shapes.sh [MIXTRAIN] [ROUNDS] [PYTHON]
#   PYTHON: the development venv's python (tools/setup_dev_venv.sh), to write the random models.
set -euo pipefail
MIXTRAIN="${1:-build/mixtrain}"
ROUNDS="${2:-3}"
PY="${3:-.venv-dev/bin/python}"
MODELS_DIR="${MIXTRAIN_DATA_DIR:-data}/models"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

"$PY" bench/make_random_encoder.py --kind distilbert --layers 6 --out "$OUT/distilbert-base" \
  --tokenizer "$MODELS_DIR/all-minilm-l6-v2" >/dev/null 2>&1
"$PY" bench/make_random_encoder.py --kind bert --layers 12 --out "$OUT/bert-base" \
  --tokenizer "$MODELS_DIR/all-minilm-l6-v2" >/dev/null 2>&1
declare -A DIR=([minilm]="$MODELS_DIR/all-minilm-l6-v2" [distilbert-base]="$OUT/distilbert-base" [bert-base]="$OUT/bert-base")
declare -A STEPS=([minilm]=14 [distilbert-base]=8 [bert-base]=6)
MODELS=(minilm distilbert-base bert-base)
FT=(finetune --task finefoods --batch-size 16 --max-len 128 --test-examples 16 --profile 2)

for r in $(seq 1 "$ROUNDS"); do
  for m in "${MODELS[@]}"; do
    for p in 32-true bf16-mixed; do
      OMP_NUM_THREADS=2 "$MIXTRAIN" --threads 2 "${FT[@]}" --model "${DIR[$m]}" --precision "$p" \
        --steps "${STEPS[$m]}" --json "$OUT/speed.$m.$p.$r.json" >/dev/null
    done
  done
done
for m in "${MODELS[@]}"; do
  for b in 16 64; do
    for p in 32-true bf16-mixed bf16-true; do
      "$MIXTRAIN" finetune --task finefoods --batch-size "$b" --max-len 128 --model "${DIR[$m]}" --precision "$p" \
        --predict-memory > "$OUT/mem.$m.$b.$p.json"
    done
  done
done

python3 - "$OUT" "$ROUNDS" "${MODELS[@]}" <<'EOF'
import json, statistics, sys
out, rounds, models = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def load(path): return json.load(open(path))
print("| model | 32-true tokens/s | bf16-mixed tokens/s | bf16 / fp32 | GEMM share of the 32-true step | GEMM bf16 / fp32 |")
print("|---|---|---|---|---|---|")
for m in models:
    tok, gemm, step = {}, {}, {}
    for p in ("32-true", "bf16-mixed"):
        runs = [load(f"{out}/speed.{m}.{p}.{r}.json") for r in range(1, rounds + 1)]
        tok[p] = statistics.median(d["tokens_per_s"] for d in runs)
        gemm[p] = statistics.median(d["breakdown_s_per_step"]["gemm"] for d in runs)
        step[p] = statistics.median(d["breakdown_s_per_step"]["step"] for d in runs)
    print(f"| {m} | {tok['32-true']:,.0f} | {tok['bf16-mixed']:,.0f} | **{tok['bf16-mixed'] / tok['32-true']:.2f}x** | "
          f"{gemm['32-true'] / step['32-true']:.0%} | {gemm['32-true'] / gemm['bf16-mixed']:.2f}x |")
print()
print("| model | batch | 32-true peak MiB | bf16-mixed | ratio | bf16-true | ratio |")
print("|---|---|---|---|---|---|---|")
for m in models:
    for b in (16, 64):
        pk = {p: load(f"{out}/mem.{m}.{b}.{p}.json")["peak_bytes"] / 2**20 for p in ("32-true", "bf16-mixed", "bf16-true")}
        print(f"| {m} | {b} | {pk['32-true']:,.1f} | {pk['bf16-mixed']:,.1f} | **{pk['bf16-mixed'] / pk['32-true']:.2f}x** | "
              f"{pk['bf16-true']:,.1f} | {pk['bf16-true'] / pk['32-true']:.2f}x |")
EOF
