#!/usr/bin/env bash
# fp8-mixed end to end: every recipe trains (the summary says fp8-mixed); the --fp8-* flags warn
# when they have no effect and refuse bad values; a model left with no fp8 layer is refused; a
# delayed-scaling checkpoint resumes only with the options it was saved with; `memory` predicts
# fp8-mixed; `compare` takes fp8-mixed beside bf16-mixed.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"

write_text "$TMP/text.txt"
write_tiny_model "$TMP/tiny.json" 3 32 16
TRAIN=("$MIXTRAIN" --threads 2 train --model "$TMP/tiny.json" --data "$TMP/text.txt" --batch-size 4 --seq-len 16)

for r in delayed current rowwise mxfp8 block; do
  expect_exit 0 "train fp8-mixed $r" -- "${TRAIN[@]}" --steps 3 --precision fp8-mixed --fp8-recipe "$r" --json
  grep -q '"precision": "fp8-mixed"' "$TMP/out" && pass || fail "summary of $r lacks its precision"
done
expect_exit 0 "e4m3 gradients, every block in fp8" -- "${TRAIN[@]}" --steps 2 --precision fp8-mixed \
  --fp8-format e4m3 --fp8-first-last --fp8-amax-history 2 --fp8-amax-compute most_recent --fp8-margin 1

# Flags with no effect warn; bad values are one-line errors.
expect_exit 0 "fp8 flag without fp8-mixed" -- "${TRAIN[@]}" --steps 1 --precision bf16-mixed --fp8-recipe current
expect_stderr_has "--fp8-recipe has no effect" "fp8 flag without fp8-mixed warns"
expect_exit 0 "history without delayed" -- "${TRAIN[@]}" --steps 1 --precision fp8-mixed --fp8-recipe mxfp8 \
  --fp8-amax-history 16
expect_stderr_has "--fp8-amax-history has no effect" "history without delayed warns"
expect_exit 2 "bad recipe" -- "${TRAIN[@]}" --steps 1 --precision fp8-mixed --fp8-recipe fp4
expect_exit 2 "bad format" -- "${TRAIN[@]}" --steps 1 --precision fp8-mixed --fp8-format e5m2
expect_exit 2 "history 0" -- "${TRAIN[@]}" --steps 1 --precision fp8-mixed --fp8-amax-history 0
# Three blocks, the first and last kept, the middle one kept by pattern: nothing left in fp8.
expect_exit 2 "no fp8 layer" -- "${TRAIN[@]}" --steps 1 --precision fp8-mixed --fp8-keep 'transformer.h.1.*'
expect_stderr_has "no linear layer runs in fp8" "no fp8 layer says why"

# A delayed-scaling checkpoint: the same options resume, another recipe is refused.
expect_exit 0 "fp8 checkpoint" -- "${TRAIN[@]}" --steps 4 --precision fp8-mixed --checkpoint-dir "$TMP/ck" \
  --stop-after 2
expect_exit 0 "fp8 resume" -- "${TRAIN[@]}" --steps 4 --precision fp8-mixed --resume "$TMP/ck"
expect_exit 2 "fp8 resume, other recipe" -- "${TRAIN[@]}" --steps 4 --precision fp8-mixed --fp8-recipe current \
  --resume "$TMP/ck"
expect_stderr_has "fp8" "the refusal names the fp8 options"

# TensorBoard: with --numerics, each sampled step adds fp8_* scalars per site and role; the HTML
# report charts the delayed recipe's scales (the middle block's 4 layers x 3 roles).
expect_exit 0 "fp8 tensorboard" -- "${TRAIN[@]}" --steps 3 --precision fp8-mixed --numerics "$TMP/tbn.jsonl" \
  --numerics-every 2 --tensorboard "$TMP/tb"
expect_exit 0 "fp8 report" -- "$MIXTRAIN" report "$TMP/tb" -o "$TMP/tb.html"
python3 - "$TMP/tb.html" <<'PY' && pass || fail "fp8 scales in the report"
import json, re, sys
h = open(sys.argv[1]).read()
assert '<canvas id="chart-fp8-scales"' in h
m = json.loads(re.search(r'<script id="report-data" type="application/json">(.*?)</script>', h, re.S).group(1))
s = m["runs"][0]["fp8_scales"]
assert len(s) == 12 and "grad_output/transformer.h.1.mlp.c_proj" in s, sorted(s)
assert all([p[0] for p in v] == [1, 3] for v in s.values()), s
assert all(v[0][1] == 1.0 and v[1][1] != 1.0 for v in s.values()), s  # scale 1 until the first update
PY

# The fp8 diagnostics: one line per fp8 site and role per sampled step (kind "fp8"). Delayed
# scaling's first step casts with scale 1: most output gradients underflow in E5M2 there.
expect_exit 0 "fp8 numerics" -- "${TRAIN[@]}" --steps 3 --precision fp8-mixed --numerics "$TMP/n.jsonl" \
  --numerics-every 2
python3 - "$TMP/n.jsonl" <<'PY' && pass || fail "fp8 numerics lines"
import json, sys
L = [json.loads(l) for l in open(sys.argv[1])]
F = [l for l in L if l["kind"] == "fp8"]
assert {l["step"] for l in F} == {1, 3}, {l["step"] for l in F}
assert len(F) == 2 * 4 * 3, len(F)  # 2 sampled steps, the middle block's 4 linear layers, 3 roles
for l in F:
    assert l["op"] == "fp8_linear" and l["recipe"] == "delayed" and l["site"].startswith("transformer.h.1."), l
    assert l["role"] in ("input", "weight", "grad_output") and l["numel"] > 0, l
    assert l["format"] == ("f8_e5m2" if l["role"] == "grad_output" else "f8_e4m3"), l
    assert 0 <= l["saturated"] <= 1 and 0 <= l["underflow"] <= 1 and 0 < l["rel_error"] < 0.5, l
first = [l for l in F if l["step"] == 1 and l["role"] == "grad_output"]
assert all(l["scale"] == 1.0 for l in first), first
assert max(l["underflow"] for l in first) > 0.5, first
PY

# Memory prediction and compare.
expect_exit 0 "memory fp8-mixed" -- "$MIXTRAIN" --threads 2 memory --model "$TMP/tiny.json" --data "$TMP/text.txt" \
  --precision fp8-mixed --fp8-recipe block --batch-size 4 --seq-len 16 --steps 2 --json "$TMP/m.json"
python3 -c "
import json, sys
j = json.load(open('$TMP/m.json'))
assert j['relative_error']['peak_bytes'] == 0, j['relative_error']
" && pass || fail "fp8-mixed memory prediction is not exact: $(head -c 300 "$TMP/m.json")"
expect_exit 0 "compare with fp8 recipes" -- "$MIXTRAIN" --threads 2 compare --model "$TMP/tiny.json" \
  --data "$TMP/text.txt" --batch-size 4 --seq-len 16 --steps 2 --precisions bf16-mixed,fp8-mixed,fp8-mixed:mxfp8 \
  --fp8-recipe current --json "$TMP/c.json"
python3 -c "
import json
j = json.load(open('$TMP/c.json'))
labels = [(r['precision'], r.get('fp8_recipe')) for r in j['runs']]
assert labels == [('bf16-mixed', None), ('fp8-mixed', 'current'), ('fp8-mixed', 'mxfp8')], labels
assert j['runs'][1]['val_loss'] != j['runs'][2]['val_loss'], j['runs']
" && pass || fail "compare rows per fp8 recipe: $(head -c 400 "$TMP/c.json")"
expect_exit 2 "compare, bad fp8 recipe" -- "$MIXTRAIN" --threads 2 compare --model "$TMP/tiny.json" \
  --data "$TMP/text.txt" --batch-size 4 --seq-len 16 --steps 2 --precisions fp8-mixed:fp4

finish
