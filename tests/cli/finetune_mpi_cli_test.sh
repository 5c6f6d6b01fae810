#!/usr/bin/env bash
# `mpirun -np 2 mixtrain finetune`: data-parallel fine-tuning, 2 ranks x 1 thread, on the tiny
# random BERT of finetune_cli_test.sh (OpenMPI, set up as mpi_cli_test.sh; fails without mpirun):
# - in all five modes, 2 ranks with --batch-size B give the step log of one process with
#   --batch-size B --grad-accum 2 --exact-grad-accum bit for bit (every field but the timings), and
#   the same test accuracy and loss per epoch; with --zero 1 too; --verify-replicas checks after
#   every step that both ranks hold the same weights and scale. 16-true diverges here: on both
#   sides at the same step, with the same error, and its summary keeps the data set's figures.
# - the epochs are counted over both ranks' batches (steps_per_epoch as one process's)
# - only rank 0 writes: one summary, one step log, one set of checkpoints, one saved model (the
#   one-process run's, byte for byte)
# - a checkpoint of the 2 ranks resumes in one process with --grad-accum 2 --exact-grad-accum on the
#   uninterrupted trajectory bit for bit
# - compare --task classify under mpirun: one table, each mode's result as one process's
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
use_mpirun

write_tiny_encoder_task "$SRC" "$TMP"  # $TMP/model, $TMP/train.tsv (96 rows), $TMP/test.tsv (40)
# 96 rows in batches of 4: 24 batches an epoch, 12 steps of 2 ranks (or of 2 micro-batches).
FT=(--threads 1 finetune --model "$TMP/model" --train "$TMP/train.tsv" --test "$TMP/test.tsv" --max-len 16
  --batch-size 4 --epochs 4 --lr 1e-2 --pooling mean)

# The fields of two summaries that must agree: test accuracy and loss, per epoch too.
same_results() {
  python3 - "$1" "$2" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
keys = ["test_accuracy", "test_loss", "steps", "skipped_steps", "steps_per_epoch", "majority_baseline"]
bad = [k for k in keys if a.get(k) != b.get(k)]
strip = lambda e: [{k: v for k, v in x.items() if k != "elapsed_s"} for x in e]
if strip(a["epochs"]) != strip(b["epochs"]): bad.append("epochs")
if bad: sys.exit(f"differ in {bad}: " + "; ".join(f"{k} {a.get(k)} / {b.get(k)}" for k in bad if k != "epochs"))
PY
}

check_mode() {  # MODE
  local mode="$1" d="$TMP/$1" how msg
  mkdir -p "$d"
  for how in two zero one; do
    case $how in
      two) run=(timeout 120 "${MPIRUN[@]}" "$MIXTRAIN" "${FT[@]}" --verify-replicas) ;;
      zero) run=(timeout 120 "${MPIRUN_LEAKS[@]}" "$MIXTRAIN" "${FT[@]}" --verify-replicas --zero 1) ;;
      one) run=("$MIXTRAIN" "${FT[@]}" --grad-accum 2 --exact-grad-accum) ;;
    esac
    "${run[@]}" --precision "$mode" --log-jsonl "$d/$how.jsonl" --json "$d/$how.json" >"$d/$how.out" 2>"$d/$how.err"
    echo $? >"$d/$how.code"
  done
  if [ "$mode" = 16-true ]; then
    # fp16 weights and gradients without loss scaling at lr 1e-2: NaN, then 20 skipped steps.
    for how in two zero one; do
      [ "$(cat "$d/$how.code")" = 3 ] && pass || fail "16-true ($how): exit $(cat "$d/$how.code"), expected 3 (diverged)"
    done
    local line
    line=$(grep -h '^mixtrain: error: training diverged' "$d/one.err")
    [ -n "$line" ] && pass || fail "16-true: one process did not say it diverged: $(tail -c 300 "$d/one.err")"
    for how in two zero; do
      grep -qxF -- "$line" "$d/$how.err" && pass || fail "16-true ($how): not the one-process error '$line': $(tail -c 300 "$d/$how.err")"
    done
    # The diverged run's summary still says what the fine-tune knew: data, baseline, epochs before.
    python3 - "$d/one.json" <<'PY' && pass || fail "16-true: the diverged summary: $(head -c 400 "$d/one.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["diverged"] is True and j["test_accuracy"] is None, j
assert j["majority_baseline"] == 0.5 and j["test_examples"] == 40 and j["train_examples"] == 96, j
assert j["steps_per_epoch"] == 12 and len(j["labels"]) == 3 and len(j["epochs"]) == (j["steps"] - 1) // 12, j
PY
  else
    for how in two zero one; do
      [ "$(cat "$d/$how.code")" = 0 ] && pass || fail "$mode ($how): exit $(cat "$d/$how.code"): $(tail -c 400 "$d/$how.err")"
    done
  fi
  for how in two zero; do
    if msg=$(same_log "$d/$how.jsonl" "$d/one.jsonl"); then pass; else
      fail "$mode: 2 ranks ($how) differ from one process with --grad-accum 2 --exact-grad-accum: $msg"
    fi
    if msg=$(same_results "$d/$how.json" "$d/one.json" 2>&1); then pass; else fail "$mode: summaries ($how / one): $msg"; fi
  done
}
for mode in $ALL_MODES; do check_mode "$mode"; done

# The 2-rank summary: 12 steps an epoch (both ranks' batches counted), 2 ranks, above the majority.
python3 - "$TMP/32-true/two.json" <<'PY' && pass || fail "2-rank summary: $(head -c 400 "$TMP/32-true/two.json")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["steps_per_epoch"] == 12 and s["steps"] == 48 and s["ranks"] == 2, s
assert s["test_accuracy"] > s["majority_baseline"], s
PY

# Only rank 0 writes: one step log (48 lines), checkpoints at 24 and 48, one saved model, which is
# the one-process run's byte for byte; its checkpoint of step 24 resumes in one process on the
# uninterrupted trajectory.
d="$TMP/outputs"
mkdir -p "$d"
if timeout 120 "${MPIRUN[@]}" "$MIXTRAIN" "${FT[@]}" --log-jsonl "$d/two.jsonl" --checkpoint-dir "$d/ck" --save-every 24 \
    --save "$d/saved-two" >"$d/out" 2>"$d/err" &&
   "$MIXTRAIN" "${FT[@]}" --grad-accum 2 --exact-grad-accum --log-jsonl "$d/one.jsonl" --save "$d/saved-one" \
    >"$d/out1" 2>"$d/err1"; then
  [ "$(wc -l <"$d/two.jsonl")" = 48 ] && pass || fail "step log has $(wc -l <"$d/two.jsonl") lines, expected 48"
  [ "$(ls "$d/ck" | grep '^step-' | tr '\n' ' ')" = "step-000024 step-000048 " ] && pass || fail "checkpoints: $(ls "$d/ck")"
  [ "$(grep -c '^done (32-true)' "$d/out")" = 1 ] && pass || fail "not one summary line: $(tail -c 300 "$d/out")"
  if msg=$(same_tensors "$d/saved-two/model.safetensors" "$d/saved-one/model.safetensors" 2>&1); then pass; else
    fail "the model saved by 2 ranks differs from one process's: $msg"
  fi
  cp "$d/two.jsonl" "$d/resumed.jsonl"
  if "$MIXTRAIN" "${FT[@]}" --grad-accum 2 --exact-grad-accum --resume "$d/ck/step-000024" --log-jsonl "$d/resumed.jsonl" \
      >/dev/null 2>"$d/err2"; then
    if msg=$(same_log "$d/resumed.jsonl" "$d/one.jsonl"); then pass; else fail "2-rank checkpoint resumed in one process: $msg"; fi
  else
    fail "resume of the 2-rank checkpoint in one process: $(tail -c 400 "$d/err2")"
  fi
else
  fail "outputs run: $(tail -c 400 "$d/err" "$d/err1" 2>/dev/null)"
fi

# compare --task classify under mpirun: every mode's fine-tune data parallel, one table (rank 0's);
# the test accuracy and loss of one process with --grad-accum 2 --exact-grad-accum, mode for mode.
compare_under_mpirun "$TMP/compare" test_accuracy,test_loss 3 -- --threads 1 compare --task classify --model "$TMP/model" \
  --train "$TMP/train.tsv" --test "$TMP/test.tsv" --max-len 16 --batch-size 4 --epochs 2 --lr 1e-2 --pooling mean \
  --precisions 32-true,bf16-mixed,bf16-true

finish
