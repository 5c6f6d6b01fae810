#!/usr/bin/env bash
# A run never destroys data: every output path is checked before training (not an input by
# device and inode, not a directory, not inside a checkpoint, an existing log only with
# --overwrite or --resume), devices, FIFOs and symlinks are written through, "-" is stdout, a
# failing write stops the run with exit 2 naming the file; one run per checkpoint directory.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"

write_text "$TMP/text.txt"
write_tiny_model "$TMP/tiny.json" 1 16 16
cp "$TMP/text.txt" "$TMP/text.orig"
cp "$TMP/tiny.json" "$TMP/tiny.orig"
BASE=("$MIXTRAIN" --threads 2 train --model "$TMP/tiny.json" --batch-size 4 --seq-len 16)
TRAIN=("${BASE[@]}" --data "$TMP/text.txt")
COMPARE=("$MIXTRAIN" --threads 2 compare --model "$TMP/tiny.json" --data "$TMP/text.txt" --batch-size 4 --seq-len 16)
unchanged() {  # unchanged FILE ORIGINAL WHAT
  if cmp -s "$1" "$2"; then pass; else fail "$3: $1 was changed"; fi
}

# The log on an input: refused, the input intact.
expect_exit 2 "log is the data" -- "${TRAIN[@]}" --steps 2 --log-jsonl "$TMP/text.txt"
expect_stderr_has "same file as the --data input" "log is the data"
unchanged "$TMP/text.txt" "$TMP/text.orig" "log is the data"
ln -s "$TMP/text.txt" "$TMP/link.txt"
expect_exit 2 "log is a symlink to the data" -- "${TRAIN[@]}" --steps 2 --log-jsonl "$TMP/link.txt"
unchanged "$TMP/text.txt" "$TMP/text.orig" "log is a symlink to the data"
expect_exit 2 "log is the model config" -- "${TRAIN[@]}" --steps 2 --log-jsonl "$TMP/tiny.json"
expect_stderr_has "--model" "log is the model config"
unchanged "$TMP/tiny.json" "$TMP/tiny.orig" "log is the model config"

# The log into a checkpoint being resumed.
expect_exit 0 "a checkpoint" -- "${TRAIN[@]}" --steps 2 --checkpoint-dir "$TMP/ck"
cp "$TMP/ck/step-000002/model.safetensors" "$TMP/model.orig"
expect_exit 2 "log into a checkpoint" -- "${TRAIN[@]}" --steps 4 --resume "$TMP/ck" --checkpoint-dir "$TMP/ck" \
  --log-jsonl "$TMP/ck/step-000002/model.safetensors"
expect_stderr_has "inside a checkpoint" "log into a checkpoint"
unchanged "$TMP/ck/step-000002/model.safetensors" "$TMP/model.orig" "log into a checkpoint"

# An existing log: refused unless --overwrite (or --resume, which continues it).
expect_exit 0 "first log" -- "${TRAIN[@]}" --steps 2 --log-jsonl "$TMP/run.jsonl"
cp "$TMP/run.jsonl" "$TMP/run.orig"
expect_exit 2 "existing log" -- "${TRAIN[@]}" --steps 3 --log-jsonl "$TMP/run.jsonl"
expect_stderr_has "--overwrite" "existing log"
unchanged "$TMP/run.jsonl" "$TMP/run.orig" "existing log"
expect_exit 0 "existing log with --overwrite" -- "${TRAIN[@]}" --steps 3 --log-jsonl "$TMP/run.jsonl" --overwrite
[ "$(wc -l <"$TMP/run.jsonl")" = 3 ] && pass || fail "--overwrite did not replace the log"

# A failing write stops the run: exit 2 naming the file.
expect_exit 2 "log on a full device" -- "${TRAIN[@]}" --steps 2 --log-jsonl /dev/full
expect_stderr_has "/dev/full" "log on a full device"
expect_exit 2 "summary JSON on a full stdout" -- bash -c '"$@" >/dev/full' _ "${TRAIN[@]}" --steps 1 --json

# "-" is stdout, for the log and for --json; no file named "-".
(cd "$TMP" && "${TRAIN[@]}" --steps 2 --log-jsonl - >"$TMP/stdout.jsonl" 2>"$TMP/err")
python3 -c "import json,sys; L=[json.loads(l) for l in open(sys.argv[1])]; assert [l['step'] for l in L] == [1, 2], L" \
  "$TMP/stdout.jsonl" && pass || fail "--log-jsonl - is not the step log on stdout: $(head -c 300 "$TMP/stdout.jsonl")"
(cd "$TMP" && "${COMPARE[@]}" --steps 1 --precisions 32-true --json - >"$TMP/cmp.out" 2>"$TMP/err")
python3 -c "import json,sys; t=open(sys.argv[1]).read(); j=json.loads(t[t.index('{'):]); assert j['runs'][0]['precision'] == '32-true'" \
  "$TMP/cmp.out" && pass || fail "compare --json - is not JSON on stdout"
[ ! -e "$TMP/-" ] && pass || fail "a file named '-' was created"

# Devices, FIFOs and symlinks are written through, never replaced.
ln -s "$TMP/target.json" "$TMP/out-link.json"
: >"$TMP/target.json"
expect_exit 0 "compare --json through a symlink" -- "${COMPARE[@]}" --steps 1 --precisions 32-true --json "$TMP/out-link.json"
[ -L "$TMP/out-link.json" ] && pass || fail "the symlink given as output was replaced"
python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$TMP/target.json" && pass || fail "the symlink's target holds no JSON"
mkfifo "$TMP/fifo"
cat "$TMP/fifo" >"$TMP/from-fifo.json" &
reader=$!
expect_exit 0 "compare --json into a FIFO" -- "${COMPARE[@]}" --steps 1 --precisions 32-true --json "$TMP/fifo"
wait "$reader"
[ -p "$TMP/fifo" ] && pass || fail "the FIFO was replaced by a file"
python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$TMP/from-fifo.json" && pass || fail "no JSON came through the FIFO"
expect_exit 0 "log to /dev/null" -- "${TRAIN[@]}" --steps 1 --log-jsonl /dev/null
[ -c /dev/null ] && pass || fail "/dev/null is no longer a device"

# Unusable outputs are found before any training (no progress line printed).
expect_exit 2 "compare --json into a directory" -- "${COMPARE[@]}" --steps 50 --precisions 32-true --json "$TMP"
expect_stderr_has "is a directory" "compare --json into a directory"
[ ! -s "$TMP/out" ] && pass || fail "compare trained before refusing its --json: $(head -c 200 "$TMP/out")"
expect_exit 2 "bench gemm --json into a directory" -- "$MIXTRAIN" --threads 2 bench gemm --json "$TMP"
[ ! -s "$TMP/out" ] && pass || fail "bench gemm ran before refusing its --json"
expect_exit 2 "bench train --json into a directory" -- "$MIXTRAIN" --threads 2 bench train --model "$TMP/tiny.json" \
  --data "$TMP/text.txt" --batch-size 4 --seq-len 16 --steps 20 --json "$TMP"
[ ! -s "$TMP/out" ] && pass || fail "bench train ran before refusing its --json"
echo x >"$TMP/a-file"
expect_exit 2 "checkpoint dir is a file" -- "${TRAIN[@]}" --steps 50 --checkpoint-dir "$TMP/a-file"
expect_stderr_has "--checkpoint-dir" "checkpoint dir is a file"
[ ! -s "$TMP/out" ] && pass || fail "trained before refusing --checkpoint-dir"
expect_exit 2 "log in a missing directory" -- "${TRAIN[@]}" --steps 50 --log-jsonl "$TMP/no/such/log.jsonl"
expect_stderr_has "does not exist" "log in a missing directory"
if [ "$(id -u)" != 0 ]; then  # root writes anywhere
  mkdir "$TMP/ro" && chmod 555 "$TMP/ro"
  expect_exit 2 "read-only checkpoint dir" -- "${TRAIN[@]}" --steps 50 --checkpoint-dir "$TMP/ro/ck"
fi
expect_exit 2 "checkpoint dir in /proc" -- "${TRAIN[@]}" --steps 50 --checkpoint-dir /proc/mixtrain-ck
expect_exit 2 "two outputs on one file" -- "${COMPARE[@]}" --steps 1 --precisions 32-true --log-jsonl "$TMP/same.jsonl" \
  --json "$TMP/same.32-true.jsonl"

# One run per checkpoint directory: a second is refused at once with the holder's pid; the lock
# dies with its holder (kill -9).
"${TRAIN[@]}" --steps 1000000 --checkpoint-dir "$TMP/locked" --save-every 1000000 >/dev/null 2>&1 &
holder=$!
for _ in $(seq 1 200); do [ -s "$TMP/locked/.lock" ] && break; sleep 0.05; done
expect_exit 2 "second run on a locked directory" -- "${TRAIN[@]}" --steps 2 --checkpoint-dir "$TMP/locked" --resume "$TMP/locked"
expect_stderr_has "in use by another run (pid $holder)" "second run on a locked directory"
kill -9 "$holder"
wait "$holder" 2>/dev/null
expect_exit 0 "the lock dies with its holder" -- "${TRAIN[@]}" --steps 2 --checkpoint-dir "$TMP/locked" --resume "$TMP/locked"

# A planted symlink at DIR/.lock (the lock is opened as root too): refused without following it,
# its target untouched; a FIFO there is refused as well, without hanging.
mkdir -p "$TMP/linklock"
echo precious >"$TMP/victim"
cp "$TMP/victim" "$TMP/victim.orig"
ln -s "$TMP/victim" "$TMP/linklock/.lock"
expect_exit 2 "a symlink at DIR/.lock" -- "${TRAIN[@]}" --steps 1 --checkpoint-dir "$TMP/linklock"
expect_stderr_has ".lock is a symbolic link: refused" "a symlink at DIR/.lock"
unchanged "$TMP/victim" "$TMP/victim.orig" "a symlink at DIR/.lock"
rm "$TMP/linklock/.lock" && mkfifo "$TMP/linklock/.lock"
expect_exit 2 "a FIFO at DIR/.lock" -- timeout 20 "${TRAIN[@]}" --steps 1 --checkpoint-dir "$TMP/linklock"
expect_stderr_has ".lock is not a regular file: refused" "a FIFO at DIR/.lock"

# An atomic write's temporary file has a name nobody can predict and is created new: a symlink
# planted at the old name (FILE.tmp.<pid>, the pid the command runs as) is neither followed nor
# renamed over FILE.
(
  ln -s "$TMP/victim" "$TMP/conv.json.tmp.$BASHPID"
  exec "$MIXTRAIN" --threads 1 bench convert --mib 1 --json "$TMP/conv.json" >/dev/null 2>&1
) && pass || fail "bench convert --json with a planted temporary name"
unchanged "$TMP/victim" "$TMP/victim.orig" "a symlink planted at FILE.tmp.<pid>"
[ -f "$TMP/conv.json" ] && [ ! -L "$TMP/conv.json" ] && grep -q gbytes_per_s "$TMP/conv.json" && pass ||
  fail "the JSON is not a regular file of its own: $(ls -l "$TMP/conv.json")"
[ -z "$(find "$TMP" -maxdepth 1 -name 'conv.json.tmp.??????')" ] && pass || fail "a temporary file was left behind"


# Any output inside any checkpoint (not only the one being resumed) is refused, for every command,
# and so is a --checkpoint-dir inside one; --tensorboard may be the checkpoint directory itself
# (its event files beside the checkpoints survive the saves) but not a checkpoint's name in it.
expect_exit 2 "log inside another run's checkpoint" -- "${TRAIN[@]}" --steps 1 --log-jsonl "$TMP/ck/step-000002/log.jsonl"
expect_stderr_has "inside a checkpoint" "log inside another run's checkpoint"
[ ! -e "$TMP/ck/step-000002/log.jsonl" ] && pass || fail "a log was written into a checkpoint"
expect_exit 2 "memory --json inside a checkpoint" -- "$MIXTRAIN" memory --model "$TMP/tiny.json" --batch-size 4 \
  --seq-len 16 --predict-only --json "$TMP/ck/step-000002/memory.json"
expect_stderr_has "--json" "memory --json inside a checkpoint"
expect_exit 2 "checkpoint dir inside a checkpoint" -- "${TRAIN[@]}" --steps 1 --checkpoint-dir "$TMP/ck/step-000002/nested"
expect_stderr_has "--checkpoint-dir" "checkpoint dir inside a checkpoint"
[ ! -e "$TMP/ck/step-000002/nested" ] && pass || fail "a checkpoint directory was created inside a checkpoint"
expect_exit 2 "tensorboard at a checkpoint's name" -- "${TRAIN[@]}" --steps 4 --save-every 2 --checkpoint-dir "$TMP/ck2" \
  --tensorboard "$TMP/ck2/step-000004"
expect_stderr_has "--tensorboard" "tensorboard at a checkpoint's name"
expect_exit 0 "tensorboard in the checkpoint directory" -- "${TRAIN[@]}" --steps 4 --save-every 2 --keep 1 \
  --checkpoint-dir "$TMP/ck3" --tensorboard "$TMP/ck3"
[ -n "$(find "$TMP/ck3" -maxdepth 1 -name 'events.out.tfevents.*')" ] && [ -d "$TMP/ck3/step-000004" ] && pass ||
  fail "the event file or the checkpoint is missing: $(ls -a "$TMP/ck3")"

# One writer per log: a second run on a log another is writing is refused, even with --overwrite,
# and the first run's log is neither emptied nor torn.
"${TRAIN[@]}" --steps 1000000 --log-jsonl "$TMP/busy.jsonl" >/dev/null 2>&1 &
writer=$!
for _ in $(seq 1 400); do [ -s "$TMP/busy.jsonl" ] && break; sleep 0.05; done
expect_exit 2 "second writer of a log" -- "${TRAIN[@]}" --steps 2 --log-jsonl "$TMP/busy.jsonl" --overwrite
expect_stderr_has "another run" "second writer of a log"
kill -9 "$writer"
wait "$writer" 2>/dev/null
python3 -c "
import json, sys
L = [json.loads(l) for l in open(sys.argv[1]) if l.endswith('\\n')]
assert L and [l['step'] for l in L] == list(range(1, len(L) + 1)), [l.get('step') for l in L][:10]
" "$TMP/busy.jsonl" && pass || fail "the first run's log was emptied or torn: $(head -c 300 "$TMP/busy.jsonl")"
expect_exit 0 "the log's lock dies with its writer" -- "${TRAIN[@]}" --steps 2 --log-jsonl "$TMP/busy.jsonl" --overwrite


# bench train --json over its --data or --model: refused, the inputs intact.
expect_exit 2 "bench train --json over the data" -- "$MIXTRAIN" --threads 2 bench train --model "$TMP/tiny.json" \
  --data "$TMP/text.txt" --batch-size 4 --seq-len 16 --steps 3 --json "$TMP/text.txt"
expect_stderr_has "same file as the --data input" "bench train --json over the data"
unchanged "$TMP/text.txt" "$TMP/text.orig" "bench train --json over the data"
expect_exit 2 "bench train --json over the model" -- "$MIXTRAIN" --threads 2 bench train --model "$TMP/tiny.json" \
  --data "$TMP/text.txt" --batch-size 4 --seq-len 16 --steps 3 --json "$TMP/tiny.json"
unchanged "$TMP/tiny.json" "$TMP/tiny.orig" "bench train --json over the model"

finish
