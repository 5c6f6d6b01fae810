#!/usr/bin/env bash
# Checkpoints end to end: N steps straight and N/2 + resume + N/2 give the same step log bit for
# bit (losses, loss scales, gradient norms, skips) in all five precision modes; a corrupt newest
# checkpoint is skipped with a warning and the one before it used; hostile checkpoints and
# mismatched options are refused with one line and exit 2, leaving the log and the checkpoints
# as they were.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"

write_text "$TMP/text.txt"
write_tiny_model "$TMP/tiny.json" 1 16 16
COMMON=(--data "$TMP/text.txt" --batch-size 4 --seq-len 16 --eval-batches 2 --json)
TRAIN=("$MIXTRAIN" --threads 1 train --model "$TMP/tiny.json" "${COMMON[@]}")


# Resume exactness, every precision mode; options that exercise the scaler (growth, hysteresis,
# skipped steps), Kahan, stochastic and master rounding (fp32 masters in the checkpoint), SGD
# momentum and gradient accumulation.
resume_case() {
  local name="$1"
  shift
  local dir="$TMP/ck_$name"
  expect_exit 0 "$name: straight" -- "${TRAIN[@]}" --steps 8 "$@" --log-jsonl "$TMP/$name.straight.jsonl"
  expect_exit 0 "$name: first half" -- "${TRAIN[@]}" --steps 8 "$@" --log-jsonl "$TMP/$name.resumed.jsonl" \
    --checkpoint-dir "$dir" --save-every 2 --stop-after 4
  expect_exit 0 "$name: second half" -- "${TRAIN[@]}" --steps 8 "$@" --log-jsonl "$TMP/$name.resumed.jsonl" \
    --checkpoint-dir "$dir" --save-every 2 --resume "$dir"
  if same_log "$TMP/$name.straight.jsonl" "$TMP/$name.resumed.jsonl"; then pass; else fail "$name: resumed run differs"; fi
}
resume_case 32-true --precision 32-true --inject-nonfinite 6
resume_case 16-mixed --precision 16-mixed --growth-interval 2 --hysteresis 2 --inject-nonfinite 3,4,5
resume_case bf16-mixed --precision bf16-mixed --grad-accum 2
resume_case 16-true --precision 16-true --update-rounding stochastic --lr 1e-4
resume_case bf16-true --precision bf16-true --update-rounding kahan
resume_case bf16-true-sgd --precision bf16-true --optimizer sgd --momentum 0.9 --update-rounding stochastic
resume_case 32-true-sgd --precision 32-true --optimizer sgd --momentum 0
resume_case bf16-true-master --precision bf16-true --update-rounding master
resume_case 16-true-master-sgd --precision 16-true --optimizer sgd --momentum 0.9 --update-rounding master
# The checkpoints of a finished run: one per --save-every and the last, each complete.
if [ "$(cd "$TMP/ck_16-mixed" && ls | tr '\n' ' ')" = "step-000002 step-000004 step-000006 step-000008 " ] &&
  [ -f "$TMP/ck_16-mixed/step-000008/manifest.json" ] && [ -f "$TMP/ck_16-mixed/step-000008/model.safetensors" ] &&
  grep -q '"model_type": "gpt2"' "$TMP/ck_16-mixed/step-000008/config.json"; then
  pass
else
  fail "checkpoint directory layout: $(ls -a "$TMP/ck_16-mixed")"
fi

# Resuming a finished run does no step: exit 0, the summary has the validation loss, the log
# is unchanged.
cp "$TMP/16-mixed.resumed.jsonl" "$TMP/finished.jsonl"
expect_exit 0 "resume a finished run" -- "${TRAIN[@]}" --steps 8 --precision 16-mixed --growth-interval 2 --hysteresis 2 \
  --inject-nonfinite 3,4,5 --log-jsonl "$TMP/finished.jsonl" --resume "$TMP/ck_16-mixed"
if cmp -s "$TMP/finished.jsonl" "$TMP/16-mixed.resumed.jsonl" && python3 -c "
import json, sys
s = json.load(open('$TMP/out'))
sys.exit(0 if s['steps'] == 8 and s['val_loss'] is not None else 1)"; then pass; else fail "resuming a finished run"; fi

# --keep 2 keeps the two newest.
expect_exit 0 "keep 2" -- "${TRAIN[@]}" --steps 6 --checkpoint-dir "$TMP/ck_keep" --save-every 1 --keep 2
if [ "$(ls -a "$TMP/ck_keep" | tr '\n' ' ')" = ". .. .lock step-000005 step-000006 " ]; then pass; else fail "keep: $(ls -a "$TMP/ck_keep")"; fi

# A corrupt newest checkpoint: skipped with a warning naming it, the previous one used, and the
# trajectory is still the straight run's.
C="$TMP/ck_corrupt"
expect_exit 0 "corrupt: first part" -- "${TRAIN[@]}" --steps 8 --log-jsonl "$TMP/corrupt.jsonl" \
  --checkpoint-dir "$C" --save-every 2 --stop-after 6
printf 'garbage' | dd of="$C/step-000006/train_state.safetensors" bs=1 seek=100 conv=notrunc 2>/dev/null
"${TRAIN[@]}" --steps 8 --log-jsonl "$TMP/corrupt.jsonl" --checkpoint-dir "$C" --save-every 2 --resume "$C" \
  >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ $rc = 0 ] && [ "$(wc -l <"$TMP/err")" = 2 ] && grep -q "^mixtrain: warning: moved $C/step-000006 to" "$TMP/err" &&
  grep -q "^mixtrain: warning: skipping invalid checkpoint: checkpoint $C/step-000006: train_state.safetensors fails its CRC-32" "$TMP/err" &&
  grep -q '"steps": 8' "$TMP/out"; then
  pass
else
  fail "corrupt newest checkpoint: $(cat "$TMP/err")"
fi
expect_exit 0 "straight 8 steps" -- "${TRAIN[@]}" --steps 8 --log-jsonl "$TMP/plain8.jsonl"
if same_log "$TMP/plain8.jsonl" "$TMP/corrupt.jsonl"; then pass; else fail "run resumed past a corrupt checkpoint differs"; fi

# The skipped corrupt checkpoint was moved aside (newer than where the run continued), then
# step 6 was saved again by the resumed run.
if [ -d "$C/abandoned-step-000006" ] && [ -f "$C/step-000006/manifest.json" ]; then pass; else fail "corrupt checkpoint not set aside: $(ls "$C")"; fi

# Resuming from an older checkpoint than the newest: the newer ones are moved aside so that the
# next --resume of the directory continues this run, not the abandoned one.
O="$TMP/ck_older"
expect_exit 0 "older: first run" -- "${TRAIN[@]}" --steps 8 --checkpoint-dir "$O" --save-every 2
expect_exit 2 "older: options differ" -- "${TRAIN[@]}" --steps 8 --lr 0.002 --checkpoint-dir "$O" --resume "$O/step-000004"
expect_exit 0 "older: branch from step 4" -- "${TRAIN[@]}" --steps 8 --checkpoint-dir "$O" --save-every 2 \
  --resume "$O/step-000004" --stop-after 6
expect_stderr_has "abandoned-step-000008" "older: the newer checkpoint is moved aside"
if [ "$(cd "$O" && ls | tr '\n' ' ')" = "abandoned-step-000006 abandoned-step-000008 step-000002 step-000004 step-000006 " ]; then
  pass
else
  fail "older: directory after the branch: $(ls "$O")"
fi
# A fresh run into a directory that already holds checkpoints is refused.
expect_exit 2 "fresh run into a used directory" -- "${TRAIN[@]}" --steps 8 --checkpoint-dir "$O"
expect_stderr_has "already holds checkpoints" "fresh run into a used directory"
expect_stderr_has "continue them with --resume=$O," "the refusal names the flag that continues"

# Refusals: exit 2, one line naming the problem, log and checkpoints untouched.
# (.lock holds the pid of the latest run that locked the directory: not the run's data.)
snapshot() { (cd "$TMP" && find ck_corrupt -type f ! -name .lock | sort | xargs md5sum; md5sum corrupt.jsonl); }
snapshot >"$TMP/before"
expect_exit 2 "resume with another lr" -- "${TRAIN[@]}" --steps 8 --lr 0.002 --log-jsonl "$TMP/corrupt.jsonl" \
  --checkpoint-dir "$C" --resume "$C"
expect_stderr_has "options differ, lr" "another lr"
echo '{"n_layer": 1, "n_head": 4, "n_embd": 16, "block_size": 16}' >"$TMP/tiny4.json"
expect_exit 2 "resume with another model" -- "$MIXTRAIN" --threads 1 train --model "$TMP/tiny4.json" "${COMMON[@]}" --steps 8 --log-jsonl "$TMP/corrupt.jsonl" \
  --checkpoint-dir "$C" --resume "$C"
expect_stderr_has "model." "another model"
expect_exit 2 "resume with another precision" -- "${TRAIN[@]}" --steps 8 --precision bf16-true \
  --log-jsonl "$TMP/corrupt.jsonl" --resume "$C"
# (Where medium runs as highest, a warning line says so before the error line.)
"${TRAIN[@]}" --steps 8 --matmul-precision medium --log-jsonl "$TMP/corrupt.jsonl" --resume "$C" >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" = 2 ] && [ "$(grep -c '^mixtrain: error: ' "$TMP/err")" = 1 ] && pass ||
  fail "resume with another matmul precision: exit $rc, stderr $(head -c 300 "$TMP/err")"
expect_stderr_has "options differ, matmul_precision" "another matmul precision"
expect_exit 2 "resume past --steps" -- "${TRAIN[@]}" --steps 3 --log-jsonl "$TMP/corrupt.jsonl" --resume "$C/step-000008"
expect_stderr_has "past --steps 3" "resume past --steps"
expect_exit 2 "resume from a missing path" -- "${TRAIN[@]}" --steps 8 --log-jsonl "$TMP/corrupt.jsonl" --resume "$TMP/nope"
expect_stderr_has "$TMP/nope" "missing path"
cp -r "$C/step-000006" "$TMP/named_bad"
printf 'garbage' | dd of="$TMP/named_bad/train_state.safetensors" bs=1 seek=100 conv=notrunc 2>/dev/null
expect_exit 2 "named corrupt checkpoint" -- "${TRAIN[@]}" --steps 8 --log-jsonl "$TMP/corrupt.jsonl" \
  --resume "$TMP/named_bad"
expect_stderr_has "CRC-32" "named corrupt checkpoint"
expect_exit 2 "save-every without a directory" -- "${TRAIN[@]}" --steps 8 --save-every 2
expect_stderr_has "error: --save-every needs --checkpoint-dir" "library errors name the CLI's flags"
expect_exit 2 "resume and init-from" -- "${TRAIN[@]}" --steps 8 --resume "$C" --init-from "$C"
expect_stderr_has "error: --resume and --init-from exclude each other" "resume and init-from"
snapshot >"$TMP/after"
if cmp -s "$TMP/before" "$TMP/after"; then pass; else fail "a refused resume changed files: $(diff "$TMP/before" "$TMP/after")"; fi

# Every checkpoint corrupt: refused (one line naming the newest), nothing overwritten.
A="$TMP/ck_allbad"
cp -r "$C" "$A"
for d in "$A"/step-*; do printf 'x' | dd of="$d/model.safetensors" bs=1 seek=50 conv=notrunc 2>/dev/null; done
cp "$TMP/corrupt.jsonl" "$TMP/allbad.jsonl"
expect_exit 2 "all checkpoints corrupt" -- "${TRAIN[@]}" --steps 8 --log-jsonl "$TMP/allbad.jsonl" --checkpoint-dir "$A" --resume "$A"
expect_stderr_has "no valid checkpoint in $A" "all corrupt"
if cmp -s "$TMP/corrupt.jsonl" "$TMP/allbad.jsonl"; then pass; else fail "all corrupt: the log was changed"; fi

# Hostile content behind valid checksums (what a forged or buggy writer could produce): each is
# refused by the training-state reader, naming the file and the field.
forge() {  # forge CHECKPOINT PYTHON-EDIT: rewrites train_state's JSON, fixes sizes and checksums
  python3 - "$1" "$2" <<'PY'
import json, struct, sys, zlib
ck, edit = sys.argv[1], sys.argv[2]
p = ck + "/train_state.safetensors"
data = open(p, "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
state = json.loads(header["__metadata__"]["mixtrain"])
exec(edit)
header["__metadata__"]["mixtrain"] = json.dumps(state)
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * ((8 - (8 + len(text)) % 8) % 8)
data = struct.pack("<Q", len(text)) + text + data[8 + n:]
open(p, "wb").write(data)
m = json.load(open(ck + "/manifest.json"))
m.pop("checksum")
m["files"]["train_state.safetensors"] = {"bytes": len(data), "crc32": "%08x" % zlib.crc32(data)}
m["checksum"] = "%08x" % zlib.crc32(json.dumps(m, separators=(",", ":")).encode())
json.dump(m, open(ck + "/manifest.json", "w"), indent=2)
PY
}
for edit in 'state["step"] = "4"' 'state["scaler"]["scale"] = -1' 'state["model"] = 3' \
  'state["optimizer"]["kind"] = "lion"' 'del state["counters"]' 'state["precision"] = "fp4-mixed"'; do
  F="$TMP/forged"
  rm -rf "$F"
  cp -r "$C/step-000004" "$F"
  forge "$F" "$edit"
  expect_exit 2 "forged state: $edit" -- "${TRAIN[@]}" --steps 8 --resume "$F"
  expect_stderr_has "training state $F/train_state.safetensors" "forged state names the file: $edit"
done
# The forger itself is right: an unedited rewrite loads.
rm -rf "$F" && cp -r "$C/step-000004" "$F" && forge "$F" 'pass'
expect_exit 0 "re-checksummed unedited state resumes" -- "${TRAIN[@]}" --steps 5 --resume "$F"

finish
