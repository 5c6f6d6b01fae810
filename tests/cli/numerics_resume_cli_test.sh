#!/usr/bin/env bash
# The numerics diagnostics across a resume, train and finetune: a run interrupted after a
# skipped step and resumed has the uninterrupted run's skips_by_site in its --json (the counts
# travel in the checkpoint), and leaves the same --numerics file, byte for byte (records past the
# checkpoint and a torn last line of the interrupted run dropped, none written twice). An
# existing --numerics file is refused like --log-jsonl unless --overwrite or --resume.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"
SRC="${MIXTRAIN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"

write_text "$TMP/text.txt"
write_tiny_model "$TMP/tiny.json" 2 32 16
# 16-mixed from a loss scale too large for fp16, so the first steps overflow at real sites (the
# forensics name them: steps 1-4, at the loss and at block 1), and faults injected at steps 5
# (inf) and 7 (NaN), which the re-run does not find ("(unknown)"). Probes every 2 steps: 1, 3, 5, 7, 9.
BASE=("$MIXTRAIN" --threads 1 train --model "$TMP/tiny.json" --data "$TMP/text.txt" --batch-size 4 --seq-len 16
      --eval-batches 2 --precision 16-mixed --init-scale 16777216 --numerics-every 2 --json)
TRAIN=("${BASE[@]}" --steps 10 --inject-nonfinite 5,7)

# skips FILE: the skips_by_site of a --json summary, as one sorted JSON line.
skips() { python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["skips_by_site"], sort_keys=True))' "$1"; }

expect_exit 0 "straight run" -- "${TRAIN[@]}" --log-jsonl "$TMP/straight.jsonl" --numerics "$TMP/straight.num.jsonl"
cp "$TMP/out" "$TMP/straight.json"
# The rig does what the test needs: real sites and the injected faults, before and after step 6.
if python3 - "$TMP/straight.json" "$TMP/straight.num.jsonl" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["skips_by_site"]
assert s.get("(unknown)") == 2, s
assert sum(s.values()) >= 4 and len(s) >= 2, s
assert sorted({json.loads(l)["step"] for l in open(sys.argv[2])}) == [1, 3, 5, 7, 9]
PY
then pass; else fail "the straight run's skips or probes: $(head -c 600 "$TMP/straight.json")"; fi

# Interrupted: checkpoints at 3 and 6, the run gets to step 7 (its step 7 records written) and
# dies while writing step 9's: the kill is simulated by a torn last line. Resumed from step 6.
CK="$TMP/ck"
expect_exit 0 "first part" -- "${TRAIN[@]}" --log-jsonl "$TMP/resumed.jsonl" --numerics "$TMP/resumed.num.jsonl" \
  --checkpoint-dir "$CK" --save-every 3 --stop-after 7
rm -rf "$CK/step-000007"
printf '{"step": 9, "site": "transformer.h.0.mlp.c_fc", "op": "lin' >>"$TMP/resumed.num.jsonl"
grep -q '"step": *7' "$TMP/resumed.num.jsonl" && pass || fail "the first part wrote no records of step 7"
expect_exit 0 "resumed part" -- "${TRAIN[@]}" --log-jsonl "$TMP/resumed.jsonl" --numerics "$TMP/resumed.num.jsonl" \
  --checkpoint-dir "$CK" --save-every 3 --resume "$CK"
cp "$TMP/out" "$TMP/resumed.json"
[ "$(skips "$TMP/resumed.json")" = "$(skips "$TMP/straight.json")" ] && pass ||
  fail "skips_by_site after resume: $(skips "$TMP/resumed.json"), straight: $(skips "$TMP/straight.json")"
same_log "$TMP/straight.jsonl" "$TMP/resumed.jsonl" && pass || fail "resumed step log differs"
cmp -s "$TMP/straight.num.jsonl" "$TMP/resumed.num.jsonl" && pass ||
  fail "resumed numerics log differs: $(cmp "$TMP/straight.num.jsonl" "$TMP/resumed.num.jsonl" 2>&1)"

# An existing --numerics file: refused before training (left as it was), replaced with --overwrite.
cp "$TMP/straight.num.jsonl" "$TMP/before.jsonl"
expect_exit 2 "existing numerics file" -- "${BASE[@]}" --steps 2 --numerics "$TMP/straight.num.jsonl"
expect_stderr_has "--numerics: $TMP/straight.num.jsonl already exists (--overwrite replaces it; --resume continues its run)" \
  "existing numerics file"
cmp -s "$TMP/before.jsonl" "$TMP/straight.num.jsonl" && pass || fail "a refused run changed the numerics file"
expect_exit 0 "existing numerics file with --overwrite" -- "${BASE[@]}" --steps 2 --numerics "$TMP/straight.num.jsonl" --overwrite
[ "$(python3 -c 'import json,sys; print(sorted({json.loads(l)["step"] for l in open(sys.argv[1])}))' "$TMP/straight.num.jsonl")" = "[1]" ] &&
  pass || fail "--overwrite did not replace the numerics file"
# stdout is not a file that exists: no refusal.
expect_exit 0 "numerics to stdout" -- "${BASE[@]}" --steps 1 --numerics -

# The same for finetune: the encoder fixture (as finetune_cli_test.sh), faults at steps 3 and 9 of
# 12, probes at 1, 5 and 9.
write_tiny_encoder_task "$SRC" "$TMP"
M="$TMP/model"
FT=("$MIXTRAIN" --threads 1 finetune --model "$M" --train "$TMP/train.tsv" --test "$TMP/test.tsv" --max-len 16
  --batch-size 8 --lr 1e-2 --epochs 1 --pooling mean --inject-nonfinite 3,9 --numerics-every 4)
expect_exit 0 "finetune straight" -- "${FT[@]}" --json "$TMP/ft.json" --numerics "$TMP/ft.num.jsonl"
[ "$(skips "$TMP/ft.json")" = '{"(unknown)": 2}' ] && pass || fail "finetune skips_by_site: $(skips "$TMP/ft.json")"
# Checkpoints at 4 and 6; the one at 6 lost: resumed from 4, step 5's records written again.
expect_exit 0 "finetune first part" -- "${FT[@]}" --numerics "$TMP/ft2.num.jsonl" --checkpoint-dir "$TMP/ftck" \
  --save-every 4 --stop-after 6
rm -rf "$TMP/ftck/step-000006"
expect_exit 0 "finetune resumed part" -- "${FT[@]}" --json "$TMP/ft2.json" --numerics "$TMP/ft2.num.jsonl" \
  --checkpoint-dir "$TMP/ftck" --resume "$TMP/ftck"
[ "$(skips "$TMP/ft2.json")" = "$(skips "$TMP/ft.json")" ] && pass ||
  fail "finetune skips_by_site after resume: $(skips "$TMP/ft2.json")"
cmp -s "$TMP/ft.num.jsonl" "$TMP/ft2.num.jsonl" && pass ||
  fail "finetune resumed numerics log differs: $(cmp "$TMP/ft.num.jsonl" "$TMP/ft2.num.jsonl" 2>&1)"
expect_exit 2 "finetune: existing numerics file" -- "${FT[@]}" --numerics "$TMP/ft.num.jsonl"
expect_stderr_has "--numerics: $TMP/ft.num.jsonl already exists" "finetune: existing numerics file"
finish
