#!/usr/bin/env bash
# Crash test: trains with a checkpoint every step, kills the run with SIGKILL at random moments
# (some land inside checkpoint writes), resumes it each time with the same command line, and at the
# end compares the step log with an uninterrupted run's, field by field (timings aside).
#
#   scripts/crash_test.sh [BINARY] [--kills N] [--steps S] [--precision MODE] [--max-delay SECONDS]
#
# Prints one summary line; exit 0 only if the run completed, no corrupt checkpoint was ever
# loaded (every resume read a checkpoint whose checksums verified, and none was skipped as
# invalid) and the trajectory is identical.
set -u
BIN="build/mixtrain"
KILLS=20
STEPS=200
PRECISION=16-mixed
MAX_DELAY=0.6
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

CK="$W/ck"
mkdir -p "$CK"
kills=0 in_write=0 resumes=0 skipped=0 attempts=0
while :; do
  attempts=$((attempts + 1))
  if [ "$attempts" -gt $((KILLS * 5 + 20)) ]; then echo "crash test: gave up after $attempts attempts"; exit 1; fi
  "${RUN[@]}" --log-jsonl "$W/run.jsonl" --checkpoint-dir "$CK" --save-every 1 --keep 3 --resume "$CK" \
    >"$W/out.$attempts" 2>"$W/err.$attempts" &
  pid=$!
  if [ "$kills" -lt "$KILLS" ]; then
    if [ $((kills % 2)) = 1 ]; then
      # Every second kill aims at a checkpoint write: as soon as a hidden .step-*.tmp/ appears.
      python3 -c '
import glob, os, sys, time
ck, pid = sys.argv[1], int(sys.argv[2])
end = time.time() + 5
while time.time() < end and not glob.glob(os.path.join(ck, ".step-*.tmp")):
    pass
' "$CK" "$pid"
    else
      sleep "$(awk -v seed="$RANDOM" -v max="$MAX_DELAY" 'BEGIN { srand(seed); printf "%.3f", 0.05 + rand() * (max - 0.05) }')"
    fi
    if kill -9 "$pid" 2>/dev/null; then
      wait "$pid" 2>/dev/null
      kills=$((kills + 1))
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
