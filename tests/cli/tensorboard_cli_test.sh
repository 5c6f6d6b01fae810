#!/usr/bin/env bash
# `--tensorboard DIR` read back by TensorBoard itself: the `tensorboard` package's EventAccumulator
# (from the venv of tools/setup_dev_venv.sh --test, which scripts/test.sh creates) loads the event
# files of a run, of a resumed run (every step exactly once, equal to the step log) and of a
# comparison (one run directory per mode), and sees every tag and value of the step log. A fresh
# run into a directory holding event files, or a directory that cannot be made, is refused with
# one line and exit 2.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"

PY="${MIXTRAIN_DEV_VENV:-${MIXTRAIN_SOURCE_DIR:?}/.venv-dev}/bin/python"
if ! "$PY" -c 'import tensorboard' 2>/dev/null; then
  echo "FAIL: no tensorboard package in $PY (run tools/setup_dev_venv.sh --test; scripts/test.sh does)"
  exit 1
fi

write_text "$TMP/text.txt"
write_tiny_model "$TMP/tiny.json" 1 16 16
TRAIN=("$MIXTRAIN" --threads 1 train --model "$TMP/tiny.json" --data "$TMP/text.txt" --batch-size 4 --seq-len 16
  --eval-batches 2 --eval-every 3 --json)

# check_against_log TB_DIR LOG.jsonl: TensorBoard sees each step of the log once, with every
# scalar equal to the log's value as a float32 (NaN where the log has null).
check_against_log() {
  "$PY" - "$1" "$2" <<'PY'
import json, math, struct, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
tb_dir, log = sys.argv[1], sys.argv[2]
ea = EventAccumulator(tb_dir, size_guidance={"scalars": 0})
ea.Reload()
tags = set(ea.Tags()["scalars"])
rows = [json.loads(l) for l in open(log)]
f32 = lambda v: struct.unpack("f", struct.pack("f", v))[0]
want_tags = {"train/loss": "loss", "train/lr": "lr", "train/grad_norm": "grad_norm",
             "train/tokens_per_s": "tokens_per_s", "amp/loss_scale": "loss_scale", "amp/skipped": "skipped",
             "amp/found_inf": "found_inf", "amp/overflows": "overflows", "val/loss": "val_loss",
             "val/accuracy": "val_accuracy"}
errors = []
for extra in ("memory/parameters_mib", "memory/gradients_mib", "memory/total_mib"):
    if extra not in tags:
        errors.append("missing tag " + extra)
for tag, key in want_tags.items():
    if tag not in tags:
        errors.append("missing tag " + tag)
        continue
    events = ea.Scalars(tag)
    steps = [e.step for e in events]
    expect = [r for r in rows if key in r]
    if steps != [r["step"] for r in expect]:
        errors.append(f"{tag}: steps {steps} != the log's {[r['step'] for r in expect]}")
        continue
    for e, r in zip(events, expect):
        v = r[key]
        v = float("nan") if v is None else float(v)
        same = (math.isnan(v) and math.isnan(e.value)) or f32(v) == e.value
        if not same:
            errors.append(f"{tag} step {e.step}: tensorboard {e.value} != log {v}")
            break
print(f"{tb_dir}: {len(tags)} tags, {len(rows)} steps")
if errors:
    print("\n".join(errors[:10]))
    sys.exit(1)
PY
}

# 1. A run: every tag and value, one event per step.
"${TRAIN[@]}" --steps 7 --precision bf16-mixed --log-jsonl "$TMP/a.jsonl" --tensorboard "$TMP/tb-a" >/dev/null
if check_against_log "$TMP/tb-a" "$TMP/a.jsonl"; then pass; else fail "single run: TensorBoard disagrees with the step log"; fi
n=$(ls "$TMP/tb-a" | grep -c '^events.out.tfevents\.')
[ "$n" = 1 ] && pass || fail "single run: $n event files, expected 1"

# 2. Resumed: a run killed after step 6 whose newest checkpoint is step 4 (the step-6 one is
# removed, as if the kill came before it was written) resumes from 4: TensorBoard sees 1..10 once
# each, equal to the step log, which equals an uninterrupted run's.
R=(--steps 10 --precision 16-mixed --checkpoint-dir "$TMP/ck" --save-every 4 --log-jsonl "$TMP/r.jsonl" --tensorboard "$TMP/tb-r")
"${TRAIN[@]}" "${R[@]}" --stop-after 6 >/dev/null
rm -rf "$TMP/ck/step-000006"
"${TRAIN[@]}" "${R[@]}" --resume "$TMP/ck" >/dev/null 2>"$TMP/resume.err"
grep -q "dropped 2 TensorBoard events after step 4" "$TMP/resume.err" && pass ||
  fail "resume: no warning about the 2 dropped events: $(cat "$TMP/resume.err")"
if check_against_log "$TMP/tb-r" "$TMP/r.jsonl"; then pass; else fail "resumed run: TensorBoard disagrees with the step log"; fi
"${TRAIN[@]}" --steps 10 --precision 16-mixed --log-jsonl "$TMP/straight.jsonl" --tensorboard "$TMP/tb-s" >/dev/null
if "$PY" - "$TMP/r.jsonl" "$TMP/straight.jsonl" <<'PY'
import json, sys
load = lambda p: [{k: v for k, v in json.loads(l).items() if k not in ("tokens_per_s", "elapsed_s")} for l in open(p)]
a, b = load(sys.argv[1]), load(sys.argv[2])
sys.exit(0 if a == b and len(a) == 10 else 1)
PY
then pass; else fail "resumed run: its step log is not the uninterrupted run's"; fi
n=$(ls "$TMP/tb-r" | grep -c '^events.out.tfevents\.')
[ "$n" = 2 ] && pass || fail "resumed run: $n event files, expected 2 (the first run's, cut to step 4, and the resumed one's)"

# 3. compare: one TensorBoard run per mode, each agreeing with that mode's step log.
"$MIXTRAIN" --threads 1 compare --model "$TMP/tiny.json" --data "$TMP/text.txt" --batch-size 4 --seq-len 16 \
  --eval-batches 2 --steps 4 --precisions 32-true,bf16-true:kahan --log-jsonl "$TMP/c.jsonl" \
  --tensorboard "$TMP/tb-c" >/dev/null
for tag in 32-true bf16-true-kahan; do
  if check_against_log "$TMP/tb-c/$tag" "$TMP/c.$tag.jsonl"; then pass; else fail "compare: run $tag"; fi
done

# 4. Refusals: a fresh run into a directory that holds event files (nothing is overwritten), and a
# directory that cannot be created.
before=$(cat "$TMP"/tb-a/* | sha256sum)
expect_exit 2 "fresh run into a used TensorBoard directory" -- "${TRAIN[@]}" --steps 3 --tensorboard "$TMP/tb-a"
expect_stderr_has "--tensorboard" "used TensorBoard directory"
[ "$(cat "$TMP"/tb-a/* | sha256sum)" = "$before" ] && pass || fail "the refused run changed the event files"
# A comparison is refused before its first run when any mode's directory is used (here the
# second one's): the first mode's directory gets no second file.
rm -rf "$TMP/tb-c/32-true"
expect_exit 2 "compare into a used TensorBoard directory" -- "$MIXTRAIN" --threads 1 compare --model "$TMP/tiny.json" \
  --data "$TMP/text.txt" --batch-size 4 --seq-len 16 --steps 2 --precisions 32-true,bf16-true:kahan --tensorboard "$TMP/tb-c"
expect_stderr_has "$TMP/tb-c/bf16-true-kahan" "compare into a used TensorBoard directory"
[ ! -e "$TMP/tb-c/32-true" ] && pass || fail "the refused comparison trained its first mode"
# A path holding the word "tensorboard" stays as it is in the message.
cp -r "$TMP/tb-a" "$TMP/tensorboard"
expect_exit 2 "fresh run into a used directory named tensorboard" -- "${TRAIN[@]}" --steps 3 --tensorboard "$TMP/tensorboard"
expect_stderr_has "--tensorboard $TMP/tensorboard already holds event files" "used directory named tensorboard"
echo x >"$TMP/file"
expect_exit 2 "TensorBoard directory under a file" -- "${TRAIN[@]}" --steps 3 --tensorboard "$TMP/file/tb"
expect_stderr_has "$TMP/file/tb" "TensorBoard directory under a file"

finish
