#!/usr/bin/env bash
# ZeRO stage 3 (--zero 3: parameters sharded, each block gathered around its forward and again in
# backward) under mpirun, 2 ranks x 1 thread (OpenMPI, set up as mpi_cli_test.sh):
# - in all five precision modes (ALL_MODES, cli_common.sh) and with activation checkpointing, the
#   fused LM head, fp8-mixed, a block kept in fp32 (--keep-fp32: its masters read), bf16-true --update-rounding master, --optim-state int8, int8
#   gradient sums and an evaluation whose batches do not split evenly over the ranks (rank 1 runs
#   one more pass, dropped): the step log of --zero 1 bit for bit, the same final weights and the
#   same optimizer state in the checkpoint, byte for byte
# - with --grad-accum 2: --zero 2's step log bit for bit (the same per-micro-batch sums)
# - a non-finite gradient in rank 1's part: both ranks skip the step, the scale halves
# - each rank's parameter bytes (the 16-bit working copy and the fp32 masters of bf16-mixed): its
#   part plus the units gathered at a time, well below the whole; `mixtrain memory --ranks 2
#   --zero 3` predicts rank 0's peak and every category to the byte (measured under mpirun),
#   without mpirun the same
# - a checkpoint saved with --zero 3 resumes with --zero 3, --zero 1 and in one process on the
#   uninterrupted trajectory, bit for bit
# - a BERT fine-tune (mean and [CLS] pooling, activation checkpointing): --zero 1's step log, test
#   results and saved model (every rank gathers the whole weights at the end for rank 0's save)
# - a model over --memory-limit in one process and under --zero 1 or 2 trains on 4 ranks with
#   --zero 3, every rank's peak within the limit, --zero 1's losses within rounding
# - compressed gathers (--allgather-dtype bf16, int8, fp8): the bytes they save, the loss within 1%
#   after 30 steps, exact checkpoints (a resume on the int8 trajectory), the prediction to the byte
# - --zero 3 in one process is the plain run; --zero 4: a one-line error
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"
use_mpirun
write_text "$TMP/text.txt"
write_tiny_model "$TMP/tiny.json" 4 32 32
# Small buckets (10 KiB): several per step, some across the boundary of the two ranks' parts.
COMMON=(--data "$TMP/text.txt" --model "$TMP/tiny.json" --batch-size 2 --threads 1 --bucket-mb 0.01)

# 1. --zero 3 against --zero 1 (REF) on 2 ranks: step log, final weights, optimizer state.
check_mode() {  # REF MODE [EXTRA FLAGS...]
  local ref="$1" mode="$2" d="$TMP/$(echo "${*:2}" | tr -c 'a-z0-9-' _)"
  shift 2
  local extra=("$@") z
  mkdir -p "$d"
  for z in "$ref" 3; do
    local run=("${MPIRUN[@]}")
    [ "$z" = 3 ] && run=("${MPIRUN_LEAKS[@]}")  # the stage under test looks for leaks (use_mpirun)
    if ! timeout 60 "${run[@]}" "$MIXTRAIN" train "${COMMON[@]}" "${extra[@]}" --steps 6 --precision "$mode" \
        --zero "$z" --verify-replicas --log-jsonl "$d/zero$z.jsonl" --checkpoint-dir "$d/zero$z" >"$d/out" 2>"$d/err"; then
      fail "$mode ${extra[*]}: 2-rank --zero $z run failed: $(tail -c 400 "$d/err")"
      return
    fi
  done
  [ "$(wc -l <"$d/zero3.jsonl")" = 6 ] && pass || fail "$mode: the --zero 3 step log has $(wc -l <"$d/zero3.jsonl") lines"
  local msg
  if msg=$(same_log "$d/zero3.jsonl" "$d/zero$ref.jsonl"); then pass; else fail "$mode ${extra[*]}: --zero 3 differs from --zero $ref: $msg"; fi
  same_checkpoint "$d/zero3/step-000006" "$d/zero$ref/step-000006" "$mode ${extra[*]}: after 6 steps, --zero 3 against --zero $ref"
}
for mode in $ALL_MODES; do check_mode 1 "$mode"; done
check_mode 1 bf16-mixed --checkpoint-activations
# (The sanitizer build leaves out those whose code ZeRO-3 does not touch: the Release run has them.)
if [ "${MIXTRAIN_SANITIZED:-0}" != "1" ]; then
  check_mode 1 bf16-mixed --fused-lm-head
  check_mode 1 fp8-mixed
  check_mode 1 bf16-true --update-rounding master
  check_mode 1 32-true --grad-reduce-dtype int8
fi
# A block's matrices kept in fp32: their masters are read (gathered when first read, then with the
# block), the other blocks' are not.
check_mode 1 bf16-mixed --keep-fp32 'transformer.h.1.*'

check_mode 1 bf16-mixed --optim-state int8 --eval-every 2 --eval-batches 3
# 2. Gradient accumulation: every micro-batch reduced, then added, as --zero 2 does.
check_mode 2 16-mixed --grad-accum 2

# 3. A non-finite gradient in rank 1's part at step 3: both ranks skip it (cli_common.sh).
rank1_injection_skips "--zero 3 injection" --zero 3

# 4. Parameter memory per rank, and the memory command's prediction against rank 0's measurement.
# (8 layers of 64: the blocks are most of the model, as in a real one.)
d="$TMP/mem"
mkdir -p "$d"
write_tiny_model "$TMP/mem.json" 8 64 32
MEM=(memory --model "$TMP/mem.json" --precision bf16-mixed --batch-size 2 --seq-len 32 --steps 2 --threads 1
     --ranks 2 --bucket-mb 0.05)
if timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" "${MEM[@]}" --zero 3 --json "$d/m3.json" >"$d/out" 2>"$d/err" &&
   "$MIXTRAIN" "${MEM[@]}" --zero 3 --predict-only --json "$d/p3.json" >"$d/out1" 2>"$d/err1" &&
   "$MIXTRAIN" "${MEM[@]}" --zero 2 --predict-only --json "$d/p2.json" >"$d/out2" 2>"$d/err2"; then
  grep -q "ZeRO stage 3" "$d/out" && pass || fail "memory --zero 3 does not say so: $(head -c 300 "$d/out")"
  python3 - "$d/m3.json" "$d/p3.json" "$d/p2.json" <<'PY' && pass || fail "memory --ranks 2 --zero 3: prediction, measurement or sharding off"
import json, sys
m, p, p2 = (json.load(open(f)) for f in sys.argv[1:])
assert m["config"]["zero"] == 3, m["config"]
pred, meas = m["predicted"]["by_category"], m["measured"]["by_category"]
assert pred == meas, (pred, meas)
assert m["predicted"]["peak_bytes"] == m["measured"]["peak_bytes"], m["relative_error"]
assert p["predicted"]["by_category"] == pred, "the prediction without mpirun differs"
# ZeRO-2 holds the whole weights; ZeRO-3 its half plus the units gathered at a time (the rest unit,
# 4% of this model, and one block of eight) in the 16-bit copy, and of the fp32 masters only those
# the ops read (layer norms, embeddings: the GEMMs read the copy).
for c, most in (("parameters", 0.68), ("master_weights", 0.53)):
    whole, got = p2["predicted"]["by_category"][c], pred[c]
    print(f"{c}: --zero 2 {whole} B, --zero 3 {got} B ({got / whole:.3f}x)")
    assert 0.5 * whole < got < most * whole, (c, got, whole)
PY
else
  fail "memory --ranks 2 --zero 3 failed: $(tail -c 400 "$d/err" "$d/err1" "$d/err2")"
fi

# 5. A --zero 3 checkpoint (16-mixed) resumed three ways on the uninterrupted trajectory.
d="$TMP/resume"
mkdir -p "$d"
if timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" --steps 6 --precision 16-mixed --zero 3 --stop-after 3 \
    --checkpoint-dir "$d/ck" --log-jsonl "$d/first.jsonl" >/dev/null 2>"$d/err"; then
  R=(timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}")
  resume_on_trajectory "$d" "$TMP/16-mixed_/zero3.jsonl" "--zero 3" zero3 -- "${R[@]}" --zero 3 --verify-replicas
  resume_on_trajectory "$d" "$TMP/16-mixed_/zero3.jsonl" "--zero 3" zero1 -- "${R[@]}" --zero 1
  resume_on_trajectory "$d" "$TMP/16-mixed_/zero3.jsonl" "--zero 3" one -- \
    "$MIXTRAIN" train "${COMMON[@]}" --grad-accum 2 --exact-grad-accum
else
  fail "--zero 3 run to the checkpoint failed: $(tail -c 400 "$d/err")"
fi

# 6. The encoder family: a fine-tune of the tiny BERT (finetune_mpi_cli_test.sh's) with --zero 3
# gives --zero 1's step log, test results and saved model, bit for bit (mean pooling; [CLS]
# pooling, whose pooler is in the rest unit, with activation checkpointing).
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
write_tiny_encoder_task "$SRC" "$TMP/ft"
FT=(--threads 1 finetune --model "$TMP/ft/model" --train "$TMP/ft/train.tsv" --test "$TMP/ft/test.tsv" --max-len 16
  --batch-size 4 --epochs 1 --lr 1e-2 --precision bf16-mixed --bucket-mb 0.05)
for how in "mean" "cls --checkpoint-activations"; do
  d="$TMP/finetune_$(echo "$how" | tr -c 'a-z' _)"
  mkdir -p "$d"
  # shellcheck disable=SC2086  # $how: the pooling and its flags
  if timeout 120 "${MPIRUN[@]}" "$MIXTRAIN" "${FT[@]}" --pooling $how --zero 3 --verify-replicas --log-jsonl "$d/zero3.jsonl" \
      --json "$d/zero3.json" --save "$d/save3" >/dev/null 2>"$d/err" &&
     timeout 120 "${MPIRUN[@]}" "$MIXTRAIN" "${FT[@]}" --pooling $how --zero 1 --log-jsonl "$d/zero1.jsonl" \
      --json "$d/zero1.json" --save "$d/save1" >/dev/null 2>"$d/err"; then
    if msg=$(same_log "$d/zero3.jsonl" "$d/zero1.jsonl"); then pass; else fail "finetune ($how) --zero 3 differs from --zero 1: $msg"; fi
    python3 - "$d/zero3.json" "$d/zero1.json" <<'PY' && pass || fail "finetune ($how) --zero 3: results differ from --zero 1"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["zero"] == 3 and b["zero"] == 1, (a["zero"], b["zero"])
for k in ("test_accuracy", "test_loss", "steps"):
    assert a[k] == b[k], (k, a[k], b[k])
PY
    cmp -s "$d/save3/model.safetensors" "$d/save1/model.safetensors" && pass ||
      fail "finetune ($how) --zero 3: the saved model differs from --zero 1's"
  else
    fail "finetune ($how) with --zero 3: $(tail -c 400 "$d/err")"
  fi
done
# 7. A model too big for --memory-limit in one process, and under --zero 1 or 2 on 4 ranks, trains
# on 4 ranks with --zero 3 (12 MB: one process needs 26.8 MB, --zero 2 at 4 ranks 13.1 MB, --zero 3
# 9.0 MB: 8 layers of 128, 32-true, a batch of 1 x 16, so that the weights and their state are
# most of the peak); every rank's measured peak within the limit, and the 4-rank step log that of
# --zero 1 (4 ranks, no limit) within the rounding of OpenMPI's sums.
d="$TMP/limit"
mkdir -p "$d"
write_tiny_model "$TMP/big.json" 8 128 16
BIG=(train --data "$TMP/text.txt" --model "$TMP/big.json" --precision 32-true --batch-size 1 --seq-len 16 --steps 3
     --threads 1 --bucket-mb 0.1)
MPI4=("${MPI_NO_LEAKS[@]}" mpirun -np 4 --oversubscribe --bind-to none)
expect_exit 2 "one process over --memory-limit" -- "$MIXTRAIN" "${BIG[@]}" --memory-limit 12000000
expect_stderr_has "but --memory-limit allows" "one process over --memory-limit"
timeout 120 "${MPI4[@]}" "$MIXTRAIN" "${BIG[@]}" --zero 2 --memory-limit 12000000 >/dev/null 2>"$d/err2"
code=$?
[ "$code" != 0 ] && [ "$code" != 124 ] && grep -q '^mixtrain: error: .*but --memory-limit allows' "$d/err2" && pass ||
  fail "--zero 2 on 4 ranks over --memory-limit: exit $code, $(head -c 300 "$d/err2")"
# (The sanitizer build leaves the --zero 1 run and the losses' comparison to the Release run.)
if timeout 180 "${MPI4[@]}" "$MIXTRAIN" "${BIG[@]}" --zero 3 --memory-limit 12000000 --log-jsonl "$d/zero3.jsonl" \
    --json >"$d/zero3.json" 2>"$d/err" &&
   { [ "${MIXTRAIN_SANITIZED:-0}" = "1" ] ||
     timeout 180 "${MPI4[@]}" "$MIXTRAIN" "${BIG[@]}" --zero 1 --log-jsonl "$d/zero1.jsonl" >/dev/null 2>"$d/err"; }; then
  python3 - "$d/zero3.json" "$d/zero3.jsonl" "$d/zero1.jsonl" <<'PY' && pass || fail "--zero 3 on 4 ranks under --memory-limit: peaks or losses off"
import json, math, os, sys
s = json.load(open(sys.argv[1]))
peaks = [sum(r.values()) for r in s["rank_peak_bytes_by_category"]]
print(f"4 ranks, --zero 3: peaks {peaks} B (limit 12,000,000; one process 26.8 MB)")
assert s["ranks"] == 4 and s["zero"] == 3 and s["steps"] == 3, s
assert s["peak_bytes"] <= 12_000_000, s["peak_bytes"]
a = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == 3 and all(math.isfinite(x["loss"]) for x in a), a
if os.path.exists(sys.argv[3]):  # (not in the sanitizer build)
    b = [json.loads(l) for l in open(sys.argv[3])]
    assert len(b) == 3
    for x, y in zip(a, b):
        assert abs(x["loss"] - y["loss"]) <= 1e-6 * abs(y["loss"]), (x["loss"], y["loss"])
PY
else
  fail "--zero 3 on 4 ranks under --memory-limit: $(tail -c 400 "$d/err")"
fi

# 8. Compressed gathers (--allgather-dtype bf16|int8|fp8): bf16-mixed's gathers send the masters
# ops read in bf16, or both buffers blockwise in 8 bits (half the bytes, plus a scale per block);
# after 30 steps the loss within 1% of the exact gathers'. A checkpoint (gathered exactly)
# resumes on the uninterrupted int8 trajectory, bit for bit; `mixtrain memory` predicts the run
# with the pieces' buffers to the byte.
d="$TMP/gather8"
mkdir -p "$d"
GSTEPS=30 WIRES="fp32 bf16 int8 fp8"
[ "${MIXTRAIN_SANITIZED:-0}" = "1" ] && GSTEPS=4 WIRES="fp32 int8"  # (the losses' closeness: Release)
G=(--data "$TMP/text.txt" --model "$TMP/mem.json" --batch-size 2 --threads 1 --bucket-mb 0.05 --steps "$GSTEPS"
   --precision bf16-mixed --zero 3 --verify-replicas)
ok=1
for w in $WIRES; do
  run=("${MPIRUN[@]}")
  [ "$w" = int8 ] && run=("${MPIRUN_LEAKS[@]}")
  timeout 120 "${run[@]}" "$MIXTRAIN" train "${G[@]}" --allgather-dtype "$w" --log-jsonl "$d/$w.jsonl" \
    --json >"$d/$w.json" 2>"$d/err" || { fail "--allgather-dtype $w: $(tail -c 400 "$d/err")"; ok=0; }
done
if [ "$ok" = 1 ]; then
  python3 - "$d" $WIRES <<'PY' && pass || fail "compressed gathers: bytes or losses off"
import json, sys
d, wires = sys.argv[1], sys.argv[2:]
run = {w: json.load(open(f"{d}/{w}.json")) for w in wires}
log = {w: [json.loads(l)["loss"] for l in open(f"{d}/{w}.jsonl")] for w in wires}
full = run["fp32"]["param_gather_bytes_per_step"]
# The exact gathers send the bf16 copy (2 bytes an element) and the masters ops read (4: the layer
# norms and embeddings, a few % here); bf16 halves the latter, int8 and fp8 send a byte for each.
want = {"bf16": (0.9, 0.9999), "int8": (0.49, 0.5 * 1.02), "fp8": (0.49, 0.5 * 1.02)}
for w in wires[1:]:
    ratio = run[w]["param_gather_bytes_per_step"] / full
    print(f"--allgather-dtype {w}: {ratio:.4f}x the exact gathers' bytes; loss at the last step {log[w][-1]:.5f} "
          f"vs {log['fp32'][-1]:.5f}, validation {run[w]['val_loss']:.5f} vs {run['fp32']['val_loss']:.5f}")
    lo, hi = want[w]
    assert lo - 1e-9 <= ratio <= hi, (w, ratio)
    # The first forward reads the gathered weights: rounded (not exact), and close (not garbage).
    assert log[w][0] != log["fp32"][0], "the first loss is the exact gathers': not compressed?"
    assert abs(log[w][0] - log["fp32"][0]) <= 1e-3 * log["fp32"][0], (w, log[w][0], log["fp32"][0])
    if len(log[w]) >= 30:  # (the Release run)
        assert abs(log[w][-1] - log["fp32"][-1]) <= 0.01 * log["fp32"][-1], (w, log[w][-1])
        assert abs(run[w]["val_loss"] - run["fp32"]["val_loss"]) <= 0.01 * run["fp32"]["val_loss"], w
PY
fi
d="$TMP/gather8_resume"
mkdir -p "$d"
GR=(timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" --zero 3 --allgather-dtype int8)
if "${GR[@]}" --steps 6 --precision 16-mixed --log-jsonl "$d/whole.jsonl" >/dev/null 2>"$d/err" &&
   "${GR[@]}" --steps 6 --precision 16-mixed --stop-after 3 --checkpoint-dir "$d/ck" --log-jsonl "$d/first.jsonl" \
     >/dev/null 2>"$d/err"; then
  resume_on_trajectory "$d" "$d/whole.jsonl" "--zero 3 --allgather-dtype int8" again -- "${GR[@]}"
else
  fail "--allgather-dtype int8 runs to the checkpoint failed: $(tail -c 400 "$d/err")"
fi
if timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" "${MEM[@]}" --zero 3 --allgather-dtype int8 --json "$d/m.json" >"$d/out" 2>"$d/err"; then
  python3 - "$d/m.json" <<'PY' && pass || fail "memory --allgather-dtype int8: prediction and measurement differ"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["predicted"]["by_category"] == m["measured"]["by_category"], m
assert m["predicted"]["peak_bytes"] == m["measured"]["peak_bytes"], m["relative_error"]
PY
else
  fail "memory --allgather-dtype int8: $(tail -c 400 "$d/err")"
fi
expect_mpi_error "--allgather-dtype int8 with --zero 2" '.*int8 compresses ZeRO-3.s parameter gathers: it needs --zero 3' -- \
  timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" --steps 1 --zero 2 --allgather-dtype int8
expect_exit 2 "--allgather-dtype fp64" -- "$MIXTRAIN" train "${COMMON[@]}" --steps 1 --allgather-dtype fp64
expect_stderr_has "--allgather-dtype must be fp32, bf16, int8 or fp8" "--allgather-dtype fp64"

# One process: one part, the plain run. Bad input: one line naming the flag, exit 2.
d="$TMP/single"
mkdir -p "$d"
if "$MIXTRAIN" train "${COMMON[@]}" --steps 4 --zero 3 --log-jsonl "$d/zero.jsonl" >/dev/null 2>"$d/err" &&
   "$MIXTRAIN" train "${COMMON[@]}" --steps 4 --log-jsonl "$d/plain.jsonl" >/dev/null 2>"$d/err"; then
  if msg=$(same_log "$d/zero.jsonl" "$d/plain.jsonl"); then pass; else fail "--zero 3 in one process differs: $msg"; fi
else
  fail "--zero 3 in one process failed: $(tail -c 400 "$d/err")"
fi
expect_exit 2 "--zero 4" -- "$MIXTRAIN" train "${COMMON[@]}" --steps 1 --zero 4
expect_stderr_has "--zero must be 0, 1" "--zero 4"
finish
