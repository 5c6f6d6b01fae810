#!/usr/bin/env bash
# The numerics diagnostics through the CLI: --numerics leaves the step log bit for bit as it was
# (timing fields aside), its JSONL has the documented schema and sampling, a skipped step gets
# its forensics line and scale event, `mixtrain numerics [--advise]` runs, bad flags are one line.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"

write_text "$TMP/text.txt"
write_tiny_model "$TMP/tiny.json" 2 32 16
TRAIN=("$MIXTRAIN" --threads 2 train --model "$TMP/tiny.json" --data "$TMP/text.txt" --batch-size 4 --seq-len 16
       --steps 5 --precision 16-mixed --inject-nonfinite 2 --force --json)

expect_exit 0 "train without probes" -- "${TRAIN[@]}" --log-jsonl "$TMP/plain.jsonl"
if [ ! -s "$TMP/err" ]; then pass; else fail "stderr of a clean run: $(head -c 300 "$TMP/err")"; fi
# The forensics' progress line (without --json, the progress is on stdout).
expect_exit 0 "progress of a skipped step" -- "$MIXTRAIN" --threads 2 train --model "$TMP/tiny.json" --data "$TMP/text.txt" \
  --batch-size 4 --seq-len 16 --steps 2 --precision 16-mixed --inject-nonfinite 2 --force
if grep -q "^step 2: non-finite gradients, step skipped (loss scale 65536.000000): a re-run of the step stayed finite" "$TMP/out" &&
   grep -q "^loss scale: backoff 65536 -> 32768 at step 2: a non-finite gradient$" "$TMP/out"; then pass
else fail "progress lines of the skipped step: $(cat "$TMP/out")"; fi
expect_exit 0 "train with probes" -- "${TRAIN[@]}" --log-jsonl "$TMP/probed.jsonl" --numerics "$TMP/n.jsonl" --numerics-every 2
if python3 - "$TMP/plain.jsonl" "$TMP/probed.jsonl" "$TMP/n.jsonl" <<'PY'
import json, sys
timing = ("tokens_per_s", "elapsed_s")
a = [{k: v for k, v in json.loads(l).items() if k not in timing} for l in open(sys.argv[1])]
b = [{k: v for k, v in json.loads(l).items() if k not in timing} for l in open(sys.argv[2])]
assert a == b, "step logs differ with --numerics"
assert a[1]["skipped"] and a[1]["scale_event"] == "backoff 65536 -> 32768 at step 2: a non-finite gradient", a[1]
recs = [json.loads(l) for l in open(sys.argv[3])]
assert sorted({r["step"] for r in recs}) == [1, 3, 5], {r["step"] for r in recs}  # every 2 from step 1
keys = ["step", "site", "op", "kind", "dtype", "calls", "numel", "amax", "zero", "nonfinite", "fp16", "bf16", "e4m3",
        "e5m2", "loss_scale"]
for r in recs:
    assert all(k in r for k in keys), r
    assert set(r["fp16"]) == {"subnormal", "flushed", "overflow"}, r
kinds = {(r["step"], r["kind"]) for r in recs}
for s in (1, 3, 5):
    for k in ("forward", "grad", "weight", "weight_grad", "update"):
        assert (s, k) in kinds, (s, k)
sites = {(r["site"], r["op"], r["kind"]) for r in recs}
assert ("transformer.h.1.mlp.c_fc", "linear", "forward") in sites, sorted(sites)[:20]
assert ("transformer.h.1.mlp.c_fc", "linear", "grad") in sites
upd = [r for r in recs if r["kind"] == "update"]
assert all("below_half_ulp" in r and r["storage"] == "f32" for r in upd)
fwd = [r for r in recs if r["kind"] == "forward" and r["op"] == "linear"]
assert all(r["dtype"] == "f16" for r in fwd), {r["dtype"] for r in fwd}  # autocast's fp16 GEMM outputs
PY
then pass; else fail "numerics log or step logs"; fi

expect_exit 0 "advise" -- "$MIXTRAIN" --threads 2 numerics --advise --model "$TMP/tiny.json" --data "$TMP/text.txt" --batch-size 4 --seq-len 16 --force
for mode in 16-mixed bf16-mixed 16-true bf16-true fp8-mixed; do
  if grep -q "^$mode: " "$TMP/out"; then pass; else fail "advice lacks $mode: $(cat "$TMP/out")"; fi
done
expect_exit 0 "advise json" -- "$MIXTRAIN" --threads 2 numerics --advise --json --model "$TMP/tiny.json" --data "$TMP/text.txt" --batch-size 4 --seq-len 16 --force
if python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["steps"] == 3 and set(j["modes"]) == {"16-mixed","bf16-mixed","16-true","bf16-true","fp8-mixed"}
s = j["fp8_sites"]  # the tiny model: 2 blocks x 4 linear layers, every recipe measured
assert [x["site"] for x in s[:4]] == ["transformer.h.0.attn.c_attn", "transformer.h.0.attn.c_proj", "transformer.h.0.mlp.c_fc", "transformer.h.0.mlp.c_proj"], s
assert len(s) == 8 and all(x["first_last"] and len(x["recipes"]) == 5 for x in s), s' "$TMP/out"; then pass; else fail "advice json: $(head -c 300 "$TMP/out")"; fi
expect_exit 0 "numerics probe run" -- "$MIXTRAIN" --threads 2 numerics --model "$TMP/tiny.json" --data "$TMP/text.txt" --batch-size 4 --seq-len 16 --force --numerics "$TMP/p.jsonl"
if [ "$(python3 -c 'import json,sys; print(sorted({json.loads(l)["step"] for l in open(sys.argv[1])}))' "$TMP/p.jsonl")" = "[1, 2, 3]" ]; then pass; else fail "numerics run steps"; fi

# --compare: a bf16-mixed and an fp8-mixed probe run of one configuration (E4M3 gradients, every
# block in fp8: casts over their bounds), and the comparison of their logs, as text and JSON.
PROBE=("$MIXTRAIN" --threads 2 numerics --model "$TMP/tiny.json" --data "$TMP/text.txt" --batch-size 4 --seq-len 16 --force --steps 4)
expect_exit 0 "bf16-mixed probe" -- "${PROBE[@]}" --precision bf16-mixed --numerics "$TMP/c_base.jsonl"
expect_exit 0 "fp8-mixed probe" -- "${PROBE[@]}" --precision fp8-mixed --fp8-recipe current --fp8-format e4m3 \
  --fp8-first-last --numerics "$TMP/c_run.jsonl"
expect_exit 0 "compare" -- "$MIXTRAIN" numerics --compare "$TMP/c_base.jsonl" "$TMP/c_run.jsonl"
if grep -q "^compared 4 sampled steps of $TMP/c_base.jsonl (base) and $TMP/c_run.jsonl (run)$" "$TMP/out" &&
   grep -q "^loss \(departs at step\|within 1.00% of the base's\)" "$TMP/out" &&
   grep -q "^fp8 casts of the run" "$TMP/out"; then pass; else fail "compare text: $(cat "$TMP/out")"; fi
expect_exit 0 "compare json" -- "$MIXTRAIN" numerics --compare "$TMP/c_base.jsonl" "$TMP/c_run.jsonl" --json \
  --loss-bound 0.5 --site-bound 0.9
if python3 - "$TMP/out" "$TMP/c_run.jsonl" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["steps_compared"] == 4 and j["loss_bound"] == 0.5 and j["site_bound"] == 0.9, j
assert j["loss_departure"] is None and 1 <= j["furthest_apart"]["step"] <= 4, j  # not 50% apart
recs = [json.loads(l) for l in open(sys.argv[2])]
assert all("loss" in r for r in recs)  # every record carries its step's loss
# Every cast the comparison lists is over a bound in the run's log, at its first step.
for f in j["fp8_over_bounds"]:
    over = [r for r in recs if r["kind"] == "fp8" and r["site"] == f["site"] and r["role"] == f["role"]
            and (r["rel_error"] > f["rel_error_bound"] or r["underflow"] > 0.05)]
    assert over and over[0]["step"] == f["first_step"] and len(over) == f["steps_over"], (f, over)
PY
then pass; else fail "compare json: $(head -c 400 "$TMP/out")"; fi
printf '%s\n' "$(head -n 1 "$TMP/c_run.jsonl")" '{"step": 2, "kind": "forward"' >"$TMP/c_bad.jsonl"
expect_exit 2 "compare a broken log" -- "$MIXTRAIN" numerics --compare "$TMP/c_base.jsonl" "$TMP/c_bad.jsonl"
expect_stderr_has "c_bad.jsonl:2: not valid JSON" "broken log named with its line"
expect_exit 2 "compare one file" -- "$MIXTRAIN" numerics --compare "$TMP/c_base.jsonl"
expect_exit 2 "bounds without compare" -- "$MIXTRAIN" numerics --model "$TMP/tiny.json" --numerics "$TMP/x.jsonl" --loss-bound 0.1
expect_stderr_has "go with --compare" "--loss-bound without --compare"

expect_exit 2 "numerics needs a file" -- "$MIXTRAIN" numerics --model "$TMP/tiny.json"
expect_stderr_has "--numerics FILE is needed" "numerics without --numerics"
expect_exit 2 "empty --numerics" -- "${TRAIN[@]}" --numerics ""
expect_stderr_has "--numerics: empty path" "empty --numerics"
expect_exit 2 "--numerics-every 0" -- "${TRAIN[@]}" --numerics "$TMP/x.jsonl" --numerics-every 0
expect_stderr_has "--numerics-every must be positive" "--numerics-every 0"
expect_exit 2 "--numerics is a directory" -- "${TRAIN[@]}" --numerics "$TMP"
expect_stderr_has "--numerics" "directory named"
expect_exit 0 "keep-fp32 in 32-true warns" -- "$MIXTRAIN" --threads 2 train --model "$TMP/tiny.json" --data "$TMP/text.txt" \
  --batch-size 4 --seq-len 16 --steps 1 --force --keep-fp32 'transformer.h.0.*'
expect_stderr_has "--keep-fp32 has no effect" "keep-fp32 warning"
expect_exit 3 "scale stuck at its minimum" -- "$MIXTRAIN" --threads 2 train --model "$TMP/tiny.json" --data "$TMP/text.txt" \
  --batch-size 4 --seq-len 16 --steps 3 --precision 16-mixed --init-scale 1e30 --min-scale 1e30 --force
expect_stderr_has "training stopped: loss scale stuck at its minimum 1e+30: step 1 overflowed there at " "stuck scale names the site"
expect_stderr_has "(--keep-fp32), or a lower --lr" "stuck scale says what to try, in flags"
finish
