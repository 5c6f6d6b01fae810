#!/usr/bin/env bash
# ZeRO stage 2 (--zero 2) under mpirun, 2 ranks x 1 thread (OpenMPI, set up as mpi_cli_test.sh):
# - in all five precision modes (ALL_MODES, cli_common.sh; and bf16-true --update-rounding master, bf16-mixed --optim-state
#   int8, bf16 gradient sums), 2 ranks with --zero 2 give the step log of 2 ranks with --zero 1 bit
#   for bit, the same final weights and the same optimizer state in the checkpoint, byte for byte
#   (--verify-replicas after every step)
# - with --grad-accum 2 (each micro-batch summed over the ranks, then added): the --zero 1 losses
#   within rounding
# - a non-finite gradient in rank 1's part: both ranks skip the step, the scale halves
# - each rank's gradient bytes, from its tracker: its part of the arena (4 bytes an element) plus
#   the buckets held, less than the whole buffer; `mixtrain memory --ranks 2 --zero 2` predicts
#   rank 0's peak and every category to the byte (measured under mpirun), without mpirun the same
# - a checkpoint saved with --zero 2 resumes with --zero 2, --zero 1 and in one process
#   (--grad-accum 2 --exact-grad-accum) on the uninterrupted trajectory, bit for bit
# - a BERT fine-tune with --zero 2: --zero 1's step log and test results bit for bit
# - --grad-reduce-dtype int8 (compressed reduce-scatter, error feedback): the same run under
#   --zero 1 and 2, a quarter of the bytes, the loss within 1% of fp32 sums after 30 steps, its
#   memory predicted to the byte; refused without ZeRO or with 16-bit gradients; fp8 (E4M3 codes)
#   under --zero 2: a quarter of the bytes, within 1% of fp32 sums; a checkpoint of int8 sums
#   resumes on the uninterrupted trajectory (its error feedback saved), with a warning where the
#   resumed run cannot use it
# - --zero 2 in one process is one part: the plain run bit for bit; --zero 4: a one-line error
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"
use_mpirun
write_text "$TMP/text.txt"
write_tiny_model "$TMP/tiny.json" 2 32 32
# Small buckets (10 KiB): several per step, some across the boundary of the two ranks' parts.
COMMON=(--data "$TMP/text.txt" --model "$TMP/tiny.json" --batch-size 2 --threads 1 --bucket-mb 0.01)

# 1. --zero 2 against --zero 1 on 2 ranks: step log, final weights, optimizer state.
check_mode() {  # MODE [EXTRA FLAGS...]
  local mode="$1" d="$TMP/$1${3:-}${5:-}"
  shift
  local extra=("$@") z
  mkdir -p "$d"
  for z in 1 2; do
    local run=("${MPIRUN[@]}")
    [ "$z" = 2 ] && run=("${MPIRUN_LEAKS[@]}")  # the stage under test looks for leaks (use_mpirun)
    if ! timeout 60 "${run[@]}" "$MIXTRAIN" train "${COMMON[@]}" "${extra[@]}" --steps 6 --precision "$mode" \
        --zero "$z" --verify-replicas --log-jsonl "$d/zero$z.jsonl" --checkpoint-dir "$d/zero$z" >"$d/out" 2>"$d/err"; then
      fail "$mode ${extra[*]}: 2-rank --zero $z run failed: $(tail -c 400 "$d/err")"
      return
    fi
  done
  [ "$(wc -l <"$d/zero2.jsonl")" = 6 ] && pass || fail "$mode: the --zero 2 step log has $(wc -l <"$d/zero2.jsonl") lines"
  local msg
  if msg=$(same_log "$d/zero2.jsonl" "$d/zero1.jsonl"); then pass; else fail "$mode ${extra[*]}: --zero 2 differs from --zero 1: $msg"; fi
  same_checkpoint "$d/zero2/step-000006" "$d/zero1/step-000006" "$mode ${extra[*]}: after 6 steps, --zero 2 against --zero 1"
}
for mode in $ALL_MODES; do check_mode "$mode"; done
check_mode bf16-true --update-rounding master
check_mode bf16-mixed --optim-state int8
check_mode 32-true --grad-reduce-dtype bf16   # fp32 gradients rounded into bf16 buckets

# 2. Gradient accumulation: every micro-batch reduced, then added (DeepSpeed's order): the losses
# of --zero 1 (which adds the micro-batches first) within rounding.
d="$TMP/accum"
mkdir -p "$d"
if timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" --steps 6 --grad-accum 2 --zero 2 --verify-replicas \
    --log-jsonl "$d/zero2.jsonl" >/dev/null 2>"$d/err" &&
   timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" --steps 6 --grad-accum 2 --zero 1 \
    --log-jsonl "$d/zero1.jsonl" >/dev/null 2>"$d/err"; then
  python3 - "$d/zero2.jsonl" "$d/zero1.jsonl" <<'PY' && pass || fail "--grad-accum 2: --zero 2 left --zero 1's trajectory"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
assert len(a) == len(b) == 6, (len(a), len(b))
for x, y in zip(a, b):
    assert abs(x["loss"] - y["loss"]) <= 1e-5 * abs(y["loss"]), (x["step"], x["loss"], y["loss"])
    assert abs(x["grad_norm"] - y["grad_norm"]) <= 1e-4 * y["grad_norm"], (x["step"], x["grad_norm"], y["grad_norm"])
PY
else
  fail "--grad-accum 2 with --zero 2: $(tail -c 400 "$d/err")"
fi

# 3. A non-finite gradient in rank 1's part at step 3: both ranks skip it (cli_common.sh).
rank1_injection_skips "--zero 2 injection" --zero 2

# 4. Gradient memory per rank: its part (fp32, 4 bytes an element) and the buckets in flight,
# below the whole buffer; the memory command's prediction against rank 0's measurement.
# (8 layers of 64: the tied embedding's gradient, whose bucket backward holds from its first op to
# its last, is a small part of the whole, as in a real model.)
d="$TMP/mem"
mkdir -p "$d"
write_tiny_model "$TMP/mem.json" 8 64 32
MEMRUN=(--data "$TMP/text.txt" --model "$TMP/mem.json" --batch-size 2 --threads 1 --bucket-mb 0.05 --steps 2
        --precision bf16-mixed --json)
if timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${MEMRUN[@]}" --zero 2 >"$d/two.json" 2>"$d/err" &&
   "$MIXTRAIN" train "${MEMRUN[@]}" >"$d/one.json" 2>"$d/err"; then
  python3 - "$d/two.json" "$d/one.json" <<'PY' && pass || fail "--zero 2: per-rank gradient bytes are not the part plus buckets"
import json, sys
two, one = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert two["zero"] == 2 and two["ranks"] == 2, two
whole = one["peak_bytes_by_category"]["gradients"]
n = whole // 4
S = -(-n // 8192) * 4096
parts = [min(S, n), n - min(S, n)]
got = [r["gradients"] for r in two["rank_peak_bytes_by_category"]]
print(f"gradients: one process {whole} B; per rank {got} B, parts {[4 * p for p in parts]} B")
for g, p in zip(got, parts):
    assert 4 * p < g < 0.75 * whole, (g, p, whole)
PY
else
  fail "--zero 2 memory runs failed: $(tail -c 400 "$d/err")"
fi
MEM=(memory --model "$TMP/mem.json" --precision bf16-mixed --batch-size 2 --seq-len 32 --steps 2 --threads 1
     --ranks 2 --zero 2 --bucket-mb 0.05)
if timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" "${MEM[@]}" --json "$d/m.json" >"$d/out" 2>"$d/err" &&
   "$MIXTRAIN" "${MEM[@]}" --predict-only --json "$d/p.json" >"$d/out1" 2>"$d/err1"; then
  grep -q "ZeRO stage 2" "$d/out" && pass || fail "memory --zero 2 does not say so: $(head -c 300 "$d/out")"
  python3 - "$d/m.json" "$d/p.json" <<'PY' && pass || fail "memory --ranks 2 --zero 2: prediction and measurement differ"
import json, sys
m, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert m["config"]["zero"] == 2, m["config"]
pred, meas = m["predicted"]["by_category"], m["measured"]["by_category"]
assert pred == meas, (pred, meas)
assert m["predicted"]["peak_bytes"] == m["measured"]["peak_bytes"], m["relative_error"]
assert p["predicted"]["by_category"] == pred, "the prediction without mpirun differs"
print(f"memory --zero 2: gradients predicted {pred['gradients']} B, measured {meas['gradients']} B")
PY
else
  fail "memory --ranks 2 --zero 2 failed: $(tail -c 400 "$d/err" "$d/err1")"
fi

# 5. A --zero 2 checkpoint (16-mixed) resumed three ways on the uninterrupted trajectory.
d="$TMP/resume"
mkdir -p "$d"
if timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" --steps 6 --precision 16-mixed --zero 2 --stop-after 3 \
    --checkpoint-dir "$d/ck" --log-jsonl "$d/first.jsonl" >/dev/null 2>"$d/err"; then
  R=(timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}")
  resume_on_trajectory "$d" "$TMP/16-mixed/zero2.jsonl" "--zero 2" zero2 -- "${R[@]}" --zero 2 --verify-replicas
  resume_on_trajectory "$d" "$TMP/16-mixed/zero2.jsonl" "--zero 2" zero1 -- "${R[@]}" --zero 1
  resume_on_trajectory "$d" "$TMP/16-mixed/zero2.jsonl" "--zero 2" one -- \
    "$MIXTRAIN" train "${COMMON[@]}" --grad-accum 2 --exact-grad-accum
else
  fail "--zero 2 run to the checkpoint failed: $(tail -c 400 "$d/err")"
fi

# 6. The encoder family: a fine-tune of the tiny BERT (finetune_mpi_cli_test.sh's) with --zero 2
# gives --zero 1's step log and test results, bit for bit.
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
write_tiny_encoder_task "$SRC" "$TMP/ft"
FT=(--threads 1 finetune --model "$TMP/ft/model" --train "$TMP/ft/train.tsv" --test "$TMP/ft/test.tsv" --max-len 16
  --batch-size 4 --epochs 1 --lr 1e-2 --pooling mean --precision bf16-mixed --bucket-mb 0.05)
d="$TMP/finetune"
mkdir -p "$d"
if timeout 120 "${MPIRUN[@]}" "$MIXTRAIN" "${FT[@]}" --zero 2 --verify-replicas --log-jsonl "$d/zero2.jsonl" \
    --json "$d/zero2.json" >/dev/null 2>"$d/err" &&
   timeout 120 "${MPIRUN[@]}" "$MIXTRAIN" "${FT[@]}" --zero 1 --log-jsonl "$d/zero1.jsonl" --json "$d/zero1.json" \
    >/dev/null 2>"$d/err"; then
  if msg=$(same_log "$d/zero2.jsonl" "$d/zero1.jsonl"); then pass; else fail "finetune --zero 2 differs from --zero 1: $msg"; fi
  python3 - "$d/zero2.json" "$d/zero1.json" <<'PY' && pass || fail "finetune --zero 2: results differ from --zero 1"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["zero"] == 2 and b["zero"] == 1, (a["zero"], b["zero"])
for k in ("test_accuracy", "test_loss", "steps"):
    assert a[k] == b[k], (k, a[k], b[k])
PY
else
  fail "finetune with --zero 2: $(tail -c 400 "$d/err")"
fi

# 7. Compressed gradients (--grad-reduce-dtype int8): --zero 1 and --zero 2 send the same int8
# pieces (bit for bit the same run), a quarter of fp32's bytes (plus a scale per 2048), and after 30
# steps the loss is within 1% of the fp32 sums' (error feedback carries what the codes miss); the
# memory command predicts the int8 buffers and the error feedback to the byte.
d="$TMP/int8"
mkdir -p "$d"
# (The sanitizer build runs the compressed paths for 6 steps: the losses' closeness is the Release
# run's.)
QSTEPS=30 RUNS=("1 fp32" "1 int8" "2 int8" "2 fp8")
[ "${MIXTRAIN_SANITIZED:-0}" = "1" ] && QSTEPS=6 RUNS=("1 int8" "2 int8" "2 fp8")
Q=(--data "$TMP/text.txt" --model "$TMP/mem.json" --batch-size 2 --threads 1 --bucket-mb 0.05 --steps "$QSTEPS"
   --precision bf16-mixed --verify-replicas)
ok=1
for v in "${RUNS[@]}"; do
  set -- $v
  timeout 120 "${MPIRUN[@]}" "$MIXTRAIN" train "${Q[@]}" --zero "$1" --grad-reduce-dtype "$2" --log-jsonl "$d/z$1$2.jsonl" \
    --json >"$d/z$1$2.json" 2>"$d/err" || { fail "--zero $1 --grad-reduce-dtype $2: $(tail -c 400 "$d/err")"; ok=0; }
done
if [ "$ok" = 1 ]; then
  if msg=$(same_log "$d/z2int8.jsonl" "$d/z1int8.jsonl"); then pass; else fail "int8 sums: --zero 2 differs from --zero 1: $msg"; fi
fi
if [ "$ok" = 1 ] && [ "$QSTEPS" = 30 ]; then
  python3 - "$d/z1int8.json" "$d/z1fp32.json" "$d/z1int8.jsonl" "$d/z1fp32.jsonl" <<'PY' && pass || fail "int8 sums: bytes or loss off"
import json, sys
q, f = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
ratio = q["grad_reduce_bytes_per_step"] / f["grad_reduce_bytes_per_step"]
lq = [json.loads(l)["loss"] for l in open(sys.argv[3])]
lf = [json.loads(l)["loss"] for l in open(sys.argv[4])]
print(f"int8 sums: {q['grad_reduce_bytes_per_step']:.0f} B a step, {ratio:.4f}x fp32's; loss at step 30 "
      f"{lq[-1]:.5f} vs {lf[-1]:.5f}, validation {q['val_loss']:.5f} vs {f['val_loss']:.5f}")
assert 0.25 <= ratio <= 0.2506, ratio
assert lq[0] == lf[0]                      # the first step's loss precedes any gradient
assert abs(lq[-1] - lf[-1]) <= 0.01 * lf[-1], (lq[-1], lf[-1])
assert abs(q["val_loss"] - f["val_loss"]) <= 0.01 * f["val_loss"]
assert any(a != b for a, b in zip(lq, lf)), "int8 sums gave the fp32 trajectory exactly: not compressed?"
PY
  python3 - "$d/z2fp8.json" "$d/z1fp32.json" "$d/z2fp8.jsonl" "$d/z1fp32.jsonl" "$d/z2int8.jsonl" <<'PY' && pass || fail "fp8 sums: bytes or loss off"
import json, sys
q, f = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
ratio = q["grad_reduce_bytes_per_step"] / f["grad_reduce_bytes_per_step"]
lq, lf, li = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[3:6])
print(f"fp8 sums: {ratio:.4f}x fp32's bytes; loss at step 30 {lq[-1]:.5f} vs {lf[-1]:.5f} (int8 {li[-1]:.5f}), "
      f"validation {q['val_loss']:.5f} vs {f['val_loss']:.5f}")
assert 0.25 <= ratio <= 0.2506, ratio
assert abs(lq[-1] - lf[-1]) <= 0.01 * lf[-1], (lq[-1], lf[-1])
assert abs(q["val_loss"] - f["val_loss"]) <= 0.01 * f["val_loss"]
assert lq != li and lq != lf, "fp8 sums gave another run's trajectory exactly"
PY
fi
MEMQ=(memory --model "$TMP/mem.json" --precision bf16-mixed --batch-size 2 --seq-len 32 --steps 2 --threads 1
      --ranks 2 --zero 1 --bucket-mb 0.05 --grad-reduce-dtype int8 --json "$d/m.json")
if timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" "${MEMQ[@]}" >"$d/out" 2>"$d/err"; then
  python3 - "$d/m.json" <<'PY' && pass || fail "memory --grad-reduce-dtype int8: prediction and measurement differ"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["predicted"]["by_category"] == m["measured"]["by_category"], m
assert m["predicted"]["peak_bytes"] == m["measured"]["peak_bytes"], m["relative_error"]
PY
else
  fail "memory --grad-reduce-dtype int8: $(tail -c 400 "$d/err")"
fi
expect_mpi_error "int8 sums without --zero" '.*int8 compresses ZeRO.s reduce-scatter: it needs --zero 1, 2 or 3' -- \
  timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" --steps 1 --grad-reduce-dtype int8
expect_mpi_error "int8 sums of bf16 gradients" '.*int8 needs fp32 gradients' -- \
  timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" --steps 1 --zero 1 --precision bf16-true \
  --grad-reduce-dtype int8

# Error feedback in checkpoints: a 16-mixed run with int8 sums stopped after step 3 resumes on its
# uninterrupted trajectory bit for bit, with --zero 2 and with --zero 1 (the rounding not yet sent
# is saved summed over the ranks and handed back, each part's to the rank that held it); a resume
# with fp32 sums, or in one process, warns that it drops it.
d="$TMP/int8_resume"
mkdir -p "$d"
QR=(timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" --grad-reduce-dtype int8)
if "${QR[@]}" --zero 2 --steps 6 --precision 16-mixed --log-jsonl "$d/whole.jsonl" >/dev/null 2>"$d/err" &&
   "${QR[@]}" --zero 2 --steps 6 --precision 16-mixed --stop-after 3 --checkpoint-dir "$d/ck" \
     --log-jsonl "$d/first.jsonl" >/dev/null 2>"$d/err"; then
  resume_on_trajectory "$d" "$d/whole.jsonl" "--grad-reduce-dtype int8" zero2 -- "${QR[@]}" --zero 2
  resume_on_trajectory "$d" "$d/whole.jsonl" "--grad-reduce-dtype int8" zero1 -- "${QR[@]}" --zero 1
  RESUMED=(train "${COMMON[@]}" --steps 4 --precision 16-mixed --resume "$d/ck/step-000003")
  WARNED="^mixtrain: warning: the checkpoint carries the error feedback of compressed gradient sums"
  timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" "${RESUMED[@]}" --zero 2 >/dev/null 2>"$d/err_fp32" &&
    grep -q "$WARNED" "$d/err_fp32" && pass || fail "int8 sums' checkpoint resumed with fp32 sums: no warning: $(head -c 300 "$d/err_fp32")"
  "$MIXTRAIN" "${RESUMED[@]}" --grad-accum 2 --exact-grad-accum >/dev/null 2>"$d/err_one" &&
    grep -q "$WARNED" "$d/err_one" && pass || fail "int8 sums' checkpoint resumed in one process: no warning: $(head -c 300 "$d/err_one")"
else
  fail "int8 sums' runs to the checkpoint failed: $(tail -c 400 "$d/err")"
fi

# 8. One process: one part, the plain run. Bad input: one line naming the flag, exit 2.
d="$TMP/single"
mkdir -p "$d"
if "$MIXTRAIN" train "${COMMON[@]}" --steps 4 --zero 2 --log-jsonl "$d/zero.jsonl" >/dev/null 2>"$d/err" &&
   "$MIXTRAIN" train "${COMMON[@]}" --steps 4 --log-jsonl "$d/plain.jsonl" >/dev/null 2>"$d/err"; then
  if msg=$(same_log "$d/zero.jsonl" "$d/plain.jsonl"); then pass; else fail "--zero 2 in one process differs: $msg"; fi
else
  fail "--zero 2 in one process failed: $(tail -c 400 "$d/err")"
fi
expect_exit 2 "--zero 4" -- "$MIXTRAIN" train "${COMMON[@]}" --steps 1 --zero 4
expect_stderr_has "--zero must be 0, 1" "--zero 4"
finish
