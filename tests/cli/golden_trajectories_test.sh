#!/usr/bin/env bash
# Behaviour unchanged, bit for bit: the step logs (loss, gradient norm, loss scale, skips, lr,
# validation loss) of the golden runs (tests/golden/golden_runs.sh: every precision mode, with and
# without activation checkpointing, skipped steps, SGD, the 16-bit roundings) must equal the ones
# recorded in tests/golden/trajectories.jsonl. Recorded with 2 threads on an AMD CPU with
# AVX-512 and AVX512-BF16 (oneDNN's kernels depend on the ISA); after an intended change of the
# numbers, re-record with tools/make_golden_trajectories.sh and say why in the commit.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"
. "$MIXTRAIN_SOURCE_DIR/tests/golden/golden_runs.sh"

golden="$MIXTRAIN_SOURCE_DIR/tests/golden/trajectories.jsonl"
if golden_record "$MIXTRAIN" "$TMP/now.jsonl"; then pass; else fail "a golden run failed"; fi
if python3 - "$golden" "$TMP/now.jsonl" <<'PY'
import json, sys
want = [json.loads(l) for l in open(sys.argv[1])]
got = [json.loads(l) for l in open(sys.argv[2])]
bad = 0
for w, g in zip(want, got):
    if w != g:
        bad += 1
        if bad <= 5:
            diff = {k: (w.get(k), g.get(k)) for k in sorted(set(w) | set(g)) if w.get(k) != g.get(k)}
            print(f"run {w['run']} step {w['step']}: (golden, now) {diff}")
if len(want) != len(got):
    print(f"{len(want)} golden lines, {len(got)} now")
    bad += 1
print(f"{len(want) - bad} of {len(want)} golden steps identical")
sys.exit(1 if bad else 0)
PY
then pass; else fail "trajectories differ from tests/golden/trajectories.jsonl"; fi
finish
