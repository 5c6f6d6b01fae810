#!/usr/bin/env bash
# SIGINT / SIGTERM: the run finishes its step, saves a checkpoint there, keeps its log, prints the
# summary marked "interrupted at step S" and exits 130 / 143; resuming from that checkpoint gives
# the uninterrupted run's trajectory bit for bit. compare reports the modes that finished.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"

write_text "$TMP/text.txt"
write_tiny_model "$TMP/tiny.json" 1 16 16
# A constant learning rate (--min-lr-ratio 1): the trajectory does not depend on --steps, so a run
# of 100000 steps interrupted at S and resumed to S+3 can be compared with S+3 steps straight.
TRAIN=("$MIXTRAIN" --threads 2 train --model "$TMP/tiny.json" --batch-size 4 --seq-len 16 --data "$TMP/text.txt"
  --min-lr-ratio 1)
strip() { python3 -c "import json,sys; [print(json.dumps({k: v for k, v in json.loads(l).items() if k not in ('tokens_per_s', 'elapsed_s')})) for l in open(sys.argv[1])]" "$1"; }

# interrupt SIGNAL NAME: starts a long run, waits for a few logged steps, sends SIGNAL.
interrupt() {
  local sig="$1" name="$2"
  "${TRAIN[@]}" --steps 100000 --checkpoint-dir "$TMP/$name.ck" --log-jsonl "$TMP/$name.jsonl" \
    >"$TMP/$name.out" 2>"$TMP/$name.err" &
  local pid=$!
  for _ in $(seq 1 600); do
    [ -f "$TMP/$name.jsonl" ] && [ "$(wc -l <"$TMP/$name.jsonl")" -ge 3 ] && break
    sleep 0.05
  done
  kill -"$sig" "$pid"
  wait "$pid"
  echo $?
}

for case in "INT 130" "TERM 143"; do
  set -- $case
  sig=$1 code=$2 name="sig$1"
  got=$(interrupt "$sig" "$name")
  [ "$got" = "$code" ] && pass || fail "SIG$sig: exit $got, expected $code; stderr: $(head -c 300 "$TMP/$name.err")"
  S=$(tail -n 1 "$TMP/$name.jsonl" | python3 -c "import json,sys; print(json.loads(sys.stdin.read())['step'])")
  grep -q "interrupted at step $S" "$TMP/$name.out" && pass ||
    fail "SIG$sig: the summary does not say 'interrupted at step $S': $(cat "$TMP/$name.out" | tail -n 2)"
  grep -q "interrupted at step $S by SIG$sig" "$TMP/$name.err" && pass || fail "SIG$sig: no stderr line naming it"
  ck=$(printf "%s/step-%06d" "$TMP/$name.ck" "$S")
  [ -f "$ck/manifest.json" ] && pass || fail "SIG$sig: no checkpoint at the interrupted step $S ($(ls "$TMP/$name.ck"))"
  # Resumed to S+3: the same trajectory as S+3 steps straight.
  N=$((S + 3))
  expect_exit 0 "SIG$sig: resume" -- "${TRAIN[@]}" --steps "$N" --checkpoint-dir "$TMP/$name.ck" --resume "$TMP/$name.ck" \
    --log-jsonl "$TMP/$name.jsonl"
  expect_exit 0 "SIG$sig: straight" -- "${TRAIN[@]}" --steps "$N" --log-jsonl "$TMP/$name.straight.jsonl"
  if [ "$(strip "$TMP/$name.jsonl")" = "$(strip "$TMP/$name.straight.jsonl")" ]; then pass; else
    fail "SIG$sig: interrupted at $S + resumed differs from $N steps straight"
  fi
done

# --json still prints the summary, marked interrupted.
"${TRAIN[@]}" --steps 100000 --json --log-jsonl "$TMP/j.jsonl" >"$TMP/j.out" 2>"$TMP/j.err" &
pid=$!
for _ in $(seq 1 600); do [ -s "$TMP/j.jsonl" ] && break; sleep 0.05; done
kill -INT "$pid"
wait "$pid"
code=$?
[ "$code" = 130 ] && pass || fail "--json run: exit $code"
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['interrupted'] is True and j['steps'] >= 1, j" "$TMP/j.out" &&
  pass || fail "--json summary of an interrupted run: $(head -c 300 "$TMP/j.out")"

# compare: the modes that finished are printed and written; exit 130.
"$MIXTRAIN" --threads 2 compare --model "$TMP/tiny.json" --data "$TMP/text.txt" --batch-size 4 --seq-len 16 --steps 30 \
  --precisions 32-true,bf16-mixed,16-mixed,bf16-true,16-true --json "$TMP/cmp.json" >"$TMP/cmp.out" 2>"$TMP/cmp.err" &
pid=$!
for _ in $(seq 1 1200); do grep -q '^32-true ' "$TMP/cmp.out" 2>/dev/null && break; sleep 0.05; done
kill -INT "$pid"
wait "$pid"
code=$?
[ "$code" = 130 ] && pass || fail "compare interrupted: exit $code; $(head -c 300 "$TMP/cmp.err")"
python3 - "$TMP/cmp.json" <<'PY' && pass || fail "compare interrupted: JSON of the finished modes: $(head -c 300 "$TMP/cmp.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert len(j["runs"]) >= 1 and j["runs"][0]["precision"] == "32-true", j
assert "interrupted_during" in j and len(j["runs"]) < 5, j
PY

# A second signal exits at once (128 + signal). The run is held before its first step by a step
# log that is a FIFO nobody reads (opening it blocks); the first SIGINT only sets the flag, so it
# stays blocked; the second must end it. (Without that, it would wait for the timeout: 124.)
mkfifo "$TMP/stuck.fifo"
timeout 60 "${TRAIN[@]}" --steps 10 --log-jsonl "$TMP/stuck.fifo" >"$TMP/double.out" 2>"$TMP/double.err" &
pid=$!
for _ in $(seq 1 100); do
  mp=$(pgrep -P "$pid" | head -n 1)  # timeout's child: mixtrain
  [ -n "$mp" ] && grep -q fifo "/proc/$mp/wchan" 2>/dev/null && break
  sleep 0.05
done
kill -INT "$mp"
sleep 0.3
kill -0 "$mp" 2>/dev/null && pass || fail "double SIGINT: the first signal alone ended the run"
kill -INT "$mp"
wait "$pid"
code=$?
[ "$code" = 130 ] && pass || fail "double SIGINT: exit $code, expected 130 at once"


# One signal during a start-up that cannot end (the data a FIFO nobody writes) ends the run with
# 128 + signal after the 2 s grace, having written nothing (it blocked for ever before).
mkfifo "$TMP/nodata.fifo"
timeout 60 "$MIXTRAIN" --threads 2 train --model "$TMP/tiny.json" --batch-size 4 --seq-len 16 --steps 10 \
  --data "$TMP/nodata.fifo" --max-data-bytes 100000 --log-jsonl "$TMP/nodata.jsonl" \
  >"$TMP/nodata.out" 2>"$TMP/nodata.err" &
pid=$!
for _ in $(seq 1 100); do
  mp=$(pgrep -P "$pid" | head -n 1)
  [ -n "$mp" ] && grep -q fifo "/proc/$mp/wchan" 2>/dev/null && break
  sleep 0.05
done
t0=$SECONDS
kill -TERM "$mp"
wait "$pid"
code=$?
[ "$code" = 143 ] && pass || fail "SIGTERM while reading a FIFO with no writer: exit $code, expected 143"
[ $((SECONDS - t0)) -le 10 ] && pass || fail "SIGTERM while reading a FIFO: ended after $((SECONDS - t0)) s"
[ ! -e "$TMP/nodata.jsonl" ] && pass || fail "a step log was written by a run that never started"

finish
