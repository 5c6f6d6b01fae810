#!/usr/bin/env bash
# Crash test: trains with a checkpoint every step, kills the run with SIGKILL at random moments
# (some land inside checkpoint writes), resumes it each time with the same command line, and at the
# end compares the step log with an uninterrupted run's, field by field (timings aside).
#
#   scripts/crash_test.sh [BINARY] [--kills N] [--steps S] [--precision MODE] [--max-delay SECONDS]
# (--max-delay: the random extra wait before an untargeted kill)
#
# Prints one summary line; exit 0 only if the run completed, no corrupt checkpoint was ever
# loaded (every resume read a checkpoint whose checksums verified, and none was skipped as
# invalid) and the trajectory is identical.
set -u
BIN="build/mixtrain"
KILLS=20
STEPS=1000
PRECISION=16-mixed
MAX_DELAY=0.05
while [ $# -gt 0 ]; do
  case "$1" in
    --kills) KILLS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --precision) PRECISION="$2"; shift 2 ;;
    --max-delay) MAX_DELAY="$2"; shift 2 ;;
    -*) echo "crash_test.sh: unknown option $1" >&2; exit 2 ;;
    *) BIN="$1"; shift ;;
  esac
done
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT

for i in $(seq 1 400); do echo "line $i: the quick brown fox jumps over the lazy dog; pack my box."; done >"$W/text.txt"
echo '{"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32}' >"$W/tiny.json"
RUN=("$BIN" --threads 1 train --model "$W/tiny.json" --data "$W/text.txt" --batch-size 4 --seq-len 32 --steps "$STEPS"
  --precision "$PRECISION" --growth-interval 3 --eval-batches 2 --log-every 1)

"${RUN[@]}" --log-jsonl "$W/reference.jsonl" >/dev/null 2>"$W/err" || { echo "crash test: the reference run failed: $(cat "$W/err")"; exit 1; }

cat >"$W/wait.py" <<'PY'
import glob, os, random, sys, time
mode, ck, log, pid, max_delay, seed = sys.argv[1:7]
random.seed(int(seed))
def lines():
    try:
        with open(log, "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return 0
def alive():
    try:
        os.kill(int(pid), 0)
        return True
    except OSError:
        return False
end = time.time() + 20
if mode == "write":
    # Until a checkpoint write is seen; if the poll keeps missing them (a loaded machine), give up
    # after 20 more steps and kill anyway, so 20 kills cannot run out of the 1000 steps.
    limit = lines() + 20
    while time.time() < end and alive() and not glob.glob(os.path.join(ck, ".step-*.tmp")) and lines() < limit:
        time.sleep(0.0005)
else:
    # After a resume the log is first cut back to the checkpoint's step: wait for it to grow.
    time.sleep(0.02)
    target = lines() + random.randint(0, 6)
    while time.time() < end and alive() and lines() < target:
        time.sleep(0.001)
    time.sleep(random.uniform(0, float(max_delay)))
PY
CK="$W/ck"
mkdir -p "$CK"
kills=0 in_write=0 resumes=0 skipped=0 attempts=0
while :; do
  attempts=$((attempts + 1))
  if [ "$attempts" -gt $((KILLS * 5 + 20)) ]; then echo "crash test: gave up after $attempts attempts"; exit 1; fi
  # A checkpoint every step while kills remain; the last run (no more kills) saves only at the
  # end (--save-every does not shape the trajectory, so it may change between resumes).
  every=(--save-every 1)
  [ "$kills" -ge "$KILLS" ] && every=()
  "${RUN[@]}" --log-jsonl "$W/run.jsonl" --checkpoint-dir "$CK" "${every[@]}" --keep 3 --resume "$CK" \
    >"$W/out.$attempts" 2>"$W/err.$attempts" &
  pid=$!
  if [ "$kills" -lt "$KILLS" ]; then
    # Odd kills aim at a checkpoint write (as soon as a hidden .step-*.tmp/ appears); even ones
    # land a random 0-MAX_DELAY s after the log has grown by a random 0-6 steps, so 20 kills
    # never run out of steps to interrupt.
    if [ $((kills % 2)) = 1 ]; then mode=write; else mode=steps; fi
    python3 "$W/wait.py" "$mode" "$CK" "$W/run.jsonl" "$pid" "$MAX_DELAY" "$RANDOM"
    if kill -9 "$pid" 2>/dev/null; then
      wait "$pid" 2>/dev/null
      kills=$((kills + 1))
      [ -n "${CRASH_DEBUG:-}" ] && echo "kill $kills ($mode): log has $(wc -l <"$W/run.jsonl" 2>/dev/null) lines; $(ls "$CK" | tr "\n" " ")"
      # A checkpoint write was under way if its hidden build directory is left behind.
      if ls -a "$CK" | grep -q '^\.step-.*\.tmp$'; then in_write=$((in_write + 1)); fi
      grep -q "^resumed from" "$W/out.$attempts" && resumes=$((resumes + 1))
      skipped=$((skipped + $(grep -c "skipping invalid checkpoint" "$W/err.$attempts")))
      continue
    fi
  fi
  wait "$pid"
  rc=$?
  grep -q "^resumed from" "$W/out.$attempts" && resumes=$((resumes + 1))
  skipped=$((skipped + $(grep -c "skipping invalid checkpoint" "$W/err.$attempts")))
  if [ "$rc" != 0 ]; then echo "crash test: a resumed run failed (exit $rc): $(cat "$W/err.$attempts")"; exit 1; fi
  break
done

if python3 - "$W/reference.jsonl" "$W/run.jsonl" <<'PY'
import json, sys
def load(p):
    rows = []
    for line in open(p):
        j = json.loads(line)
        j.pop("tokens_per_s", None); j.pop("elapsed_s", None)
        rows.append(j)
    return rows
a, b = load(sys.argv[1]), load(sys.argv[2])
if a != b:
    print("trajectories differ:", next(((x, y) for x, y in zip(a, b) if x != y), ("lengths", len(a), len(b))))
    sys.exit(1)
PY
then same=identical; else same=DIFFERENT; fi
echo "crash test ($PRECISION, $STEPS steps): $kills/$KILLS kills recovered ($in_write during checkpoint writes), $resumes resumes, $skipped invalid checkpoints skipped, final trajectory $same"
[ "$same" = identical ] && [ "$skipped" = 0 ] && [ "$kills" -ge "$KILLS" ]
