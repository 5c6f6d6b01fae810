#!/usr/bin/env bash
# Precision modes end to end: every mode trains; --inject-nonfinite makes the scaler back off and
# skip exactly those steps (16-mixed) or skips and reports them without a scaler; the step log
# and summary carry the loss-scale fields; `compare` produces its table and JSON; --matmul-precision
# does what `info` says it does here; bad values are one-line errors with exit 2.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"

write_text "$TMP/text.txt"
write_tiny_model "$TMP/tiny.json" 1 16 16
TRAIN=("$MIXTRAIN" --threads 2 train --model "$TMP/tiny.json" --data "$TMP/text.txt" --batch-size 4 --seq-len 16)

for p in 32-true 16-mixed bf16-mixed 16-true bf16-true; do
  expect_exit 0 "train $p" -- "${TRAIN[@]}" --steps 3 --precision "$p" --json
  grep -q "\"precision\": \"$p\"" "$TMP/out" && pass || fail "summary of $p lacks its precision"
done

# 16-mixed with injected overflows at steps 2 and 4: both skipped, the scale halves each time.
expect_exit 0 "16-mixed inject" -- "${TRAIN[@]}" --steps 6 --precision 16-mixed --inject-nonfinite 2,4 \
  --log-jsonl "$TMP/inj.jsonl" --json
cp "$TMP/out" "$TMP/inj_summary.json"
if python3 - "$TMP/inj.jsonl" "$TMP/inj_summary.json" <<'PY'
import json, sys
L = [json.loads(l) for l in open(sys.argv[1])]
S = json.load(open(sys.argv[2]))
assert [l["skipped"] for l in L] == [False, True, False, True, False, False], [l["skipped"] for l in L]
assert [l["found_inf"] for l in L] == [False, True, False, True, False, False]
scales = [l["loss_scale"] for l in L]
assert scales[0] == 65536 and scales[1] == 65536 and scales[2] == 32768 and scales[3] == 32768 and scales[4] == 16384, scales
assert L[-1]["overflows"] == 2
assert S["skipped_steps"] == 2 and S["final_loss_scale"] == 16384 and S["diverged"] is False
assert S["precision"] == "16-mixed"
PY
then pass; else fail "16-mixed injected overflows"; fi

# Without a scaler (bf16-mixed, bf16-true): the steps are skipped and reported, never applied.
for p in bf16-mixed bf16-true 32-true; do
  expect_exit 0 "$p inject" -- "${TRAIN[@]}" --steps 4 --precision "$p" --inject-nonfinite 3 --log-jsonl "$TMP/$p.jsonl" --json
  if python3 - "$TMP/$p.jsonl" "$TMP/out" <<'PY'
import json, math, sys
L = [json.loads(l) for l in open(sys.argv[1])]
S = json.load(open(sys.argv[2]))
assert [l["skipped"] for l in L] == [False, False, True, False], L
assert all(l["loss_scale"] == 1 for l in L)
assert S["skipped_steps"] == 1 and math.isfinite(S["val_loss"])
PY
  then pass; else fail "$p injected step not skipped/reported"; fi
done

# A static loss scale never changes; bf16-mixed may use a scaler by option.
expect_exit 0 "static scale" -- "${TRAIN[@]}" --steps 3 --precision 16-mixed --loss-scale 128 --inject-nonfinite 2 --log-jsonl "$TMP/st.jsonl" --json
python3 -c "import json,sys; L=[json.loads(l) for l in open(sys.argv[1])]; assert all(l['loss_scale']==128 for l in L), L" "$TMP/st.jsonl" && pass || fail "static scale changed"
expect_exit 0 "bf16-mixed with scaler" -- "${TRAIN[@]}" --steps 2 --precision bf16-mixed --loss-scale dynamic --json
grep -q '"final_loss_scale": 65536' "$TMP/out" && pass || fail "bf16-mixed --loss-scale dynamic did not scale"

# Bad values.
expect_exit 2 "unknown precision" -- "${TRAIN[@]}" --steps 1 --precision fp8
expect_stderr_has "32-true, 16-mixed, bf16-mixed, 16-true, bf16-true" "unknown precision lists the valid ones"
expect_exit 2 "unknown rounding" -- "${TRAIN[@]}" --steps 1 --precision bf16-true --update-rounding up
expect_exit 2 "bad loss scale" -- "${TRAIN[@]}" --steps 1 --precision 16-mixed --loss-scale lots
expect_exit 2 "scaler with 16-bit grads" -- "${TRAIN[@]}" --steps 1 --precision bf16-true --loss-scale dynamic
expect_exit 2 "bad growth factor" -- "${TRAIN[@]}" --steps 1 --precision 16-mixed --growth-factor 0.5
expect_stderr_has "--growth-factor must be > 1" "the scaler's error names the flag"
expect_exit 2 "min scale above max scale" -- "${TRAIN[@]}" --steps 1 --precision 16-mixed --min-scale 8 --max-scale 4
expect_stderr_has "--min-scale 8 is greater than --max-scale 4" "both flags named"
expect_exit 2 "bad inject list" -- "${TRAIN[@]}" --steps 1 --inject-nonfinite 2,x

# Divergence: non-finite losses --max-bad-steps times in a row stop the run (exit 3) with the log kept.
expect_exit 3 "diverged" -- "${TRAIN[@]}" --steps 40 --precision bf16-mixed --lr 1e30 --grad-clip 0 --max-bad-steps 3 --log-jsonl "$TMP/div.jsonl" --json
python3 - "$TMP/div.jsonl" "$TMP/out" <<'PY' && pass || fail "diverged run log/summary"
import json, sys
L = [json.loads(l) for l in open(sys.argv[1])]
S = json.load(open(sys.argv[2]))
assert L[-1].get("diverged") is True and L[-1]["loss"] is None
assert [l["step"] for l in L] == list(range(1, len(L) + 1))
assert S["diverged"] is True
PY

# compare: one row per mode, the documented JSON.
expect_exit 0 "compare" -- "$MIXTRAIN" --threads 2 compare --model "$TMP/tiny.json" --data "$TMP/text.txt" --batch-size 4 \
  --seq-len 16 --steps 3 --json "$TMP/cmp.json"
python3 - "$TMP/cmp.json" <<'PY' && pass || fail "compare JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert [r["precision"] for r in j["runs"]] == ["32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true"]
for r in j["runs"]:
    for k in ("tokens_per_s", "speedup", "peak_bytes", "peak_bytes_by_category", "final_train_loss",
              "val_loss", "skipped_steps", "diverged"):
        assert k in r, k
assert j["runs"][0]["speedup"] == 1.0 and j["speedup_baseline"] == "32-true"
assert j["config"]["steps"] == 3
PY
expect_exit 2 "compare bad list" -- "$MIXTRAIN" compare --precisions 32-true,fp4 --steps 1
# A diverging mode is a result, reported in its row; compare itself succeeds.
expect_exit 0 "compare with divergence" -- "$MIXTRAIN" --threads 2 compare --model "$TMP/tiny.json" --data "$TMP/text.txt" \
  --batch-size 4 --seq-len 16 --steps 8 --precisions 32-true,bf16-mixed --lr 1e30 --grad-clip 0 --max-bad-steps 2 \
  --json "$TMP/div_cmp.json"
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert all(r['diverged'] for r in j['runs']), j['runs']; assert all(r['tokens_per_s'] > 0 for r in j['runs'])" "$TMP/div_cmp.json" && pass || fail "compare rows of diverged modes"

# A run that ends with non-finite weights short of --max-bad-steps (16-true at lr 10: pure fp16
# AdamW) is diverged: exit 3, no accuracy (null, not 0), diverged true; compare flags its row
# and credits it no speed-up (its skipped steps are cheap), and goes on.
expect_exit 3 "16-true at lr 10" -- "$MIXTRAIN" --threads 2 train --precision 16-true --lr 10 --steps 5 --json
expect_stderr_has "the final evaluation's loss is NaN" "16-true at lr 10"
python3 - "$TMP/out" <<'PY' && pass || fail "the summary of a run ending non-finite"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["diverged"] is True and j["val_accuracy"] is None and j["val_loss"] is None, j
PY
expect_exit 0 "compare with a mode ending non-finite" -- "$MIXTRAIN" --threads 2 compare --precisions 32-true,16-true \
  --lr 10 --steps 5 --json "$TMP/nonfinite.json"
grep -qE '^16-true:nearest +[0-9]+ +- .* yes$' "$TMP/out" && pass || fail "compare row of a diverged mode: $(cat "$TMP/out")"
python3 - "$TMP/nonfinite.json" <<'PY' && pass || fail "compare JSON of a diverged mode"
import json, sys
runs = {r["precision"]: r for r in json.load(open(sys.argv[1]))["runs"]}
assert runs["16-true"]["diverged"] is True and runs["16-true"]["speedup"] is None, runs["16-true"]
assert runs["32-true"]["speedup"] == 1.0 and runs["32-true"]["diverged"] is False, runs["32-true"]
PY

# --matmul-precision: recorded in the summary with the fp32 GEMMs' route. Where `info` says medium
# keeps the fp32 kernel (no AMX, or oneDNN 2.x), a run warns and its step log equals highest's bit
# for bit; where it says bf16 products, the log differs (the inputs rounded to bf16).
expect_exit 0 "matmul highest" -- "${TRAIN[@]}" --steps 4 --log-jsonl "$TMP/mm_highest.jsonl" --json
expect_exit 0 "matmul medium" -- "${TRAIN[@]}" --steps 4 --matmul-precision medium --log-jsonl "$TMP/mm_medium.jsonl" --json
cp "$TMP/out" "$TMP/mm_medium_summary.json"
cp "$TMP/err" "$TMP/mm_medium_err"
"$MIXTRAIN" info --json "$TMP/mm_info.json" >/dev/null
if python3 - "$TMP/mm_medium_summary.json" "$TMP/mm_info.json" "$TMP/mm_medium_err" <<'PY'
import json, sys
s, info, err = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), open(sys.argv[3]).read()
assert s["matmul_precision"] == "medium", s["matmul_precision"]
assert s["gemm"]["f32"] == info["matmul_precision"]["medium"], (s["gemm"], info["matmul_precision"])
bf16 = info["matmul_precision"]["medium"].startswith("bf16 products")
assert ("runs fp32 GEMMs as highest here" in err) == (not bf16), err
print("bf16" if bf16 else "fp32")
PY
then pass; else fail "matmul medium: summary, info and warning disagree"; fi
medium_route="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["matmul_precision"]["medium"])' "$TMP/mm_info.json")"
if [[ "$medium_route" == "bf16 products"* ]]; then
  if same_log "$TMP/mm_highest.jsonl" "$TMP/mm_medium.jsonl" >/dev/null; then fail "medium ran bf16 but equals highest"; else pass; fi
else
  same_log "$TMP/mm_highest.jsonl" "$TMP/mm_medium.jsonl" && pass || fail "medium keeps fp32 here but differs from highest"
fi
expect_exit 0 "matmul high" -- "${TRAIN[@]}" --steps 4 --matmul-precision high --log-jsonl "$TMP/mm_high.jsonl"
expect_stderr_has "no TF32 or bf16x3" "high says it falls back"
same_log "$TMP/mm_highest.jsonl" "$TMP/mm_high.jsonl" && pass || fail "high differs from highest"
expect_exit 2 "matmul precision bad value" -- "${TRAIN[@]}" --steps 2 --matmul-precision low

finish
