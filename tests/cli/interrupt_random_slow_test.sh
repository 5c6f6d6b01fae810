#!/usr/bin/env bash
# Ctrl-C at a random moment, ten times (issue 17's goal): a 200-step run with --checkpoint-dir gets
# SIGINT after a random delay within its running time; every time it must exit 130 with a
# checkpoint at the step it stopped at, and the run resumed from there to step 200 must log the
# same trajectory as the uninterrupted run, bit for bit. The schedule is the default cosine one, so
# the resumed run also checks that the schedule continues where it stopped.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"

write_text "$TMP/text.txt"
write_tiny_model "$TMP/tiny.json" 2 32 32
TRAIN=("$MIXTRAIN" --threads 2 train --model "$TMP/tiny.json" --batch-size 8 --seq-len 32 --data "$TMP/text.txt"
  --steps 200 --precision bf16-mixed)
strip() { python3 -c "import json,sys; [print(json.dumps({k: v for k, v in json.loads(l).items() if k not in ('tokens_per_s', 'elapsed_s')})) for l in open(sys.argv[1])]" "$1"; }

start=$(date +%s.%N)
expect_exit 0 "uninterrupted run" -- "${TRAIN[@]}" --log-jsonl "$TMP/straight.jsonl"
duration=$(python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$start" "$(date +%s.%N)")
straight=$(strip "$TMP/straight.jsonl")
[ "$(wc -l <"$TMP/straight.jsonl")" = 200 ] && pass || fail "uninterrupted run: $(wc -l <"$TMP/straight.jsonl") log lines, expected 200"

RANDOM=20261130  # reproducible delays (the moment they land on still varies with the machine's load)
interrupted=0
tries=0
while [ "$interrupted" -lt 10 ] && [ "$tries" -lt 30 ]; do
  tries=$((tries + 1))
  name="run$tries"
  # A delay uniform in [2%, 95%] of the uninterrupted run's wall time (start-up included).
  delay=$(python3 -c "import sys; print(float(sys.argv[1]) * (0.02 + 0.93 * int(sys.argv[2]) / 32767))" "$duration" "$RANDOM")
  "${TRAIN[@]}" --checkpoint-dir "$TMP/$name.ck" --log-jsonl "$TMP/$name.jsonl" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  pid=$!
  sleep "$delay"
  kill -INT "$pid" 2>/dev/null
  wait "$pid"
  code=$?
  if [ "$code" = 0 ] && [ "$(wc -l <"$TMP/$name.jsonl")" = 200 ]; then
    continue  # the run finished before the signal came: not a sample
  fi
  interrupted=$((interrupted + 1))
  if [ "$code" != 130 ]; then
    fail "interrupt after ${delay}s: exit $code, expected 130; stderr: $(head -c 300 "$TMP/$name.err")"
    continue
  fi
  S=$(tail -n 1 "$TMP/$name.jsonl" | python3 -c "import json,sys; print(json.loads(sys.stdin.read())['step'])" 2>/dev/null)
  ck=$(printf "%s/step-%06d" "$TMP/$name.ck" "${S:-0}")
  if [ -z "$S" ] || [ ! -f "$ck/manifest.json" ]; then
    fail "interrupt after ${delay}s: no checkpoint at the last logged step '${S}' ($(ls "$TMP/$name.ck" 2>&1))"
    continue
  fi
  grep -q "interrupted at step $S" "$TMP/$name.out" && pass || fail "interrupt at step $S: summary not marked interrupted"
  expect_exit 0 "resume from step $S" -- "${TRAIN[@]}" --checkpoint-dir "$TMP/$name.ck" --resume "$TMP/$name.ck" \
    --log-jsonl "$TMP/$name.jsonl"
  if [ "$(strip "$TMP/$name.jsonl")" = "$straight" ]; then pass; else
    fail "interrupted at step $S (after ${delay}s) and resumed: the log differs from the uninterrupted run"
  fi
  echo "interrupt $interrupted: after ${delay}s at step $S: resumed identical"
done
[ "$interrupted" = 10 ] && pass || fail "only $interrupted of $tries runs were interrupted before they finished"

finish
