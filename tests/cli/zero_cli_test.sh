#!/usr/bin/env bash
# ZeRO stage 1 (--zero 1) under mpirun, 2 ranks x 1 thread (OpenMPI, set up as mpi_cli_test.sh):
# - in all five precision modes, 2 ranks with --zero 1 give the step log of 2 ranks without it
#   (loss, grad_norm, loss_scale, skipped) bit for bit, the same final weights and the same
#   optimizer state in the checkpoint (gathered from the ranks' parts), tensor for tensor, byte for
#   byte; --verify-replicas checks after every step that both ranks hold the same weights and
#   scale (also with bf16 gradient sums); and against one process with --grad-accum 2
#   --exact-grad-accum the same, bit for bit and byte for byte
# - a non-finite gradient in rank 1's part only (then rank 0's): both ranks skip, the scale halves
# - optimizer state per rank, from each rank's tracker (--json: rank_peak_bytes_by_category): each
#   rank's figure is its part's (the arena cut into 4096-element blocks: rank 0 holds
#   ceil(n / 8192) * 4096 elements, rank 1 the rest) and the two add up to the one-process figure
#   to the byte; masters and weights stay whole (bf16-mixed); with bf16-true --update-rounding
#   master (fp32 masters in the optimizer) the masters are the ranks' parts too, to the byte
# - all of the first point for bf16-true --update-rounding master, bf16-mixed --optim-state int8 and
#   32-true --optim-state bf16 as well
# - a checkpoint saved with --zero 1 on 2 ranks resumes on 2 ranks with --zero 1 and without it on
#   the uninterrupted trajectory bit for bit, and in one process with --grad-accum 2
#   --exact-grad-accum too
# - mpirun -np 2 mixtrain memory --ranks 2 --zero 1: the prediction equals rank 0's measurement,
#   peak and every category to the byte; the prediction without mpirun is the same
# - --zero 1 in one process is one part: the plain run bit for bit; bad input: one-line errors
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"
use_mpirun
write_text "$TMP/text.txt"
write_tiny_model "$TMP/tiny.json" 2 32 32
# Small buckets (10 KiB): several per step, some across the boundary of the two ranks' parts.
COMMON=(--data "$TMP/text.txt" --model "$TMP/tiny.json" --batch-size 2 --threads 1 --bucket-mb 0.01)


# 1. Every mode: --zero 1 against the all-reduce on 2 ranks, and against one process with
# --grad-accum 2 --exact-grad-accum (which adds the micro-batches' gradients as the ranks' sums do):
# the step log bit for bit, the final weights and the (gathered) optimizer state byte for byte.
check_mode() {  # MODE [EXTRA FLAGS...]
  local mode="$1" d="$TMP/$1${3:-}"
  shift
  local extra=("$@")
  mkdir -p "$d"
  if ! timeout 60 "${MPIRUN_LEAKS[@]}" "$MIXTRAIN" train "${COMMON[@]}" "${extra[@]}" --steps 6 --precision "$mode" --zero 1 \
      --verify-replicas --log-jsonl "$d/zero.jsonl" --checkpoint-dir "$d/zero" >"$d/out" 2>"$d/err"; then
    fail "$mode: 2-rank --zero 1 run failed: $(tail -c 400 "$d/err")"
    return
  fi
  if ! timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" "${extra[@]}" --steps 6 --precision "$mode" \
      --log-jsonl "$d/ddp.jsonl" --checkpoint-dir "$d/ddp" >"$d/out" 2>"$d/err"; then
    fail "$mode: 2-rank all-reduce run failed: $(tail -c 400 "$d/err")"
    return
  fi
  if ! "$MIXTRAIN" train "${COMMON[@]}" "${extra[@]}" --steps 6 --precision "$mode" --grad-accum 2 --exact-grad-accum \
      --log-jsonl "$d/one.jsonl" --checkpoint-dir "$d/one" >"$d/out" 2>"$d/err"; then
    fail "$mode: 1-process run failed: $(tail -c 400 "$d/err")"
    return
  fi
  [ "$(wc -l <"$d/zero.jsonl")" = 6 ] && pass || fail "$mode: the --zero 1 step log has $(wc -l <"$d/zero.jsonl") lines"
  local other what msg
  for other in ddp one; do
    [ "$other" = ddp ] && what="the all-reduce on 2 ranks" || what="one process with --grad-accum 2 --exact-grad-accum"
    if msg=$(same_log "$d/zero.jsonl" "$d/$other.jsonl"); then pass; else fail "$mode: --zero 1 differs from $what: $msg"; fi
    same_checkpoint "$d/zero/step-000006" "$d/$other/step-000006" "$mode: after 6 steps, --zero 1 against $what"
  done
}
for mode in $ALL_MODES; do check_mode "$mode"; done
# DeepSpeed's layout: a bf16 model whose optimizer keeps fp32 masters and moments, sharded.
check_mode bf16-true --update-rounding master
# Optimizer state in 8 bits and in bf16 (--optim-state): the int8 codes, block absmax and fp32
# fallback sharded and gathered; bf16 moments with their stochastic rounding.
check_mode bf16-mixed --optim-state int8
check_mode 32-true --optim-state bf16

# bf16 gradient sums (--grad-reduce-dtype bf16): reduce-scattered in bf16 as the all-reduce sums
# them, so again the same step log bit for bit (32-true: fp32 gradients staged as bf16 words).
d="$TMP/bf16sum"
mkdir -p "$d"
if timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" --steps 4 --grad-reduce-dtype bf16 --zero 1 \
    --verify-replicas --log-jsonl "$d/zero.jsonl" >/dev/null 2>"$d/err" &&
   timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" --steps 4 --grad-reduce-dtype bf16 \
    --log-jsonl "$d/ddp.jsonl" >/dev/null 2>"$d/err"; then
  if msg=$(same_log "$d/zero.jsonl" "$d/ddp.jsonl"); then pass; else
    fail "bf16 sums: --zero 1 differs from the all-reduce: $msg"
  fi
else
  fail "bf16 sums with --zero 1: $(tail -c 400 "$d/err")"
fi

# 2. A non-finite gradient in one rank's part only, at step 3 (16-mixed, initial scale 1024):
# both ranks skip it and continue at 512 with the same weights and scale (--verify-replicas).
for rank in 1 0; do
  d="$TMP/inject$rank"
  mkdir -p "$d"
  if timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" --steps 5 --precision 16-mixed --init-scale 1024 \
      --zero 1 --inject-nonfinite 3 --inject-nonfinite-rank "$rank" --verify-replicas --log-jsonl "$d/log.jsonl" \
      >/dev/null 2>"$d/err"; then
    got=$(python3 -c "
import json
for l in open('$d/log.jsonl'):
    j = json.loads(l)
    print(j['step'], j['skipped'], j['loss_scale'], j['grad_norm'] is None)" | tr '\n' ';')
    want="1 False 1024.0 False;2 False 1024.0 False;3 True 1024.0 True;4 False 512.0 False;5 False 512.0 False;"
    if [ "$got" = "$want" ]; then pass; else fail "rank-$rank injection: (step skipped scale no-norm) $got, expected $want"; fi
  else
    fail "rank-$rank injection run failed: $(tail -c 400 "$d/err")"
  fi
done

# 3. Memory per rank, from each rank's tracker: AdamW's m and v (8 bytes an element in fp32, 4
# in bf16) for the rank's part only; with master rounding the fp32 masters (4 bytes an element)
# too, while in bf16-mixed the fp32 arena (the weights autocast's fp32 ops read) stays whole.
check_memory() {  # MODE BYTES_PER_ELEMENT MASTER_BYTES_PER_ELEMENT (0: masters whole) [EXTRA FLAGS...]
  local mode="$1" per="$2" master="$3" d="$TMP/mem-$1${5:-}"
  shift 3
  local extra=("$@")
  mkdir -p "$d"
  if ! timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" "${extra[@]}" --steps 2 --precision "$mode" --zero 1 --json \
      >"$d/two.json" 2>"$d/err" ||
     ! "$MIXTRAIN" train "${COMMON[@]}" "${extra[@]}" --steps 2 --precision "$mode" --json >"$d/one.json" 2>"$d/err"; then
    fail "$mode ${extra[*]} memory runs failed: $(tail -c 400 "$d/err")"
    return
  fi
  if python3 - "$d/two.json" "$d/one.json" "$per" "$mode" "$master" <<'PY'
import json, sys
two, one, per, mode = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3]), sys.argv[4]
master = int(sys.argv[5])
ranks = two["rank_peak_bytes_by_category"]
assert two["ranks"] == 2 and two["zero"] == 1 and len(ranks) == 2, two
whole = one["peak_bytes_by_category"]["optimizer_state"]
assert whole % per == 0, (whole, per)
n = whole // per                      # the arena's elements
S = -(-n // 8192) * 4096              # rank 0's part: half, rounded up to a 4096-element block
parts = [min(S, n), n - min(S, n)]
got = [r.get("optimizer_state", 0) for r in ranks]
print(f"{mode}: optimizer state one process {whole} B, per rank {got} B (parts of {parts} of {n} elements)")
assert got == [per * p for p in parts], (got, parts)
assert sum(got) == whole
assert two["peak_bytes_by_category"]["optimizer_state"] == got[0]   # rank 0's own summary
whole_everywhere = ("parameters", "gradients") + (() if master else ("master_weights",))
for c in whole_everywhere:
    for r in ranks:
        assert r.get(c, 0) == one["peak_bytes_by_category"].get(c, 0), (c, r, one["peak_bytes_by_category"])
if master:  # the fp32 masters are sharded like the moments
    masters = [r.get("master_weights", 0) for r in ranks]
    print(f"{mode}: fp32 masters one process {one['peak_bytes_by_category']['master_weights']} B, per rank {masters} B")
    assert masters == [master * p for p in parts], (masters, parts)
    assert sum(masters) == one["peak_bytes_by_category"]["master_weights"]
PY
  then pass; else fail "$mode ${extra[*]}: per-rank optimizer state (and masters) are not the ranks' parts"; fi
}
check_memory 32-true 8 0
check_memory bf16-mixed 8 0
check_memory bf16-true 4 0
check_memory bf16-true 8 4 --update-rounding master

# 4. A checkpoint of 2 ranks with --zero 1 (16-mixed: scaler state and working copy too).
d="$TMP/resume"
mkdir -p "$d"
if timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" --steps 6 --precision 16-mixed --zero 1 --stop-after 3 \
    --checkpoint-dir "$d/ck" --log-jsonl "$d/first.jsonl" >/dev/null 2>"$d/err"; then
  R=(timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}")
  resume_on_trajectory "$d" "$TMP/16-mixed/zero.jsonl" "--zero 1" zero -- "${R[@]}" --zero 1 --verify-replicas
  resume_on_trajectory "$d" "$TMP/16-mixed/zero.jsonl" "--zero 1" ddp -- "${R[@]}" --verify-replicas
  resume_on_trajectory "$d" "$TMP/16-mixed/zero.jsonl" "--zero 1" one -- \
    "$MIXTRAIN" train "${COMMON[@]}" --grad-accum 2 --exact-grad-accum
else
  fail "--zero 1 run to the checkpoint failed: $(tail -c 400 "$d/err")"
fi

# 5. mixtrain memory --ranks 2 --zero 1: the prediction against each rank's measurement.
check_memory_command() {  # DIR PRECISION [EXTRA FLAGS...]
d="$TMP/$1"
mkdir -p "$d"
MEM=(memory --model "$TMP/tiny.json" --precision "$2" --batch-size 2 --seq-len 32 --steps 2 --threads 1
     --ranks 2 --zero 1 "${@:3}")
if timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" "${MEM[@]}" --json "$d/m.json" >"$d/out" 2>"$d/err" &&
   "$MIXTRAIN" "${MEM[@]}" --predict-only --json "$d/p.json" >"$d/out1" 2>"$d/err1"; then
  grep -q "per rank (rank 0) of 2 data-parallel ranks, ZeRO stage 1" "$d/out" && pass ||
    fail "memory --ranks 2 --zero 1 does not say it is per rank: $(head -c 300 "$d/out")"
  if python3 - "$d/m.json" "$d/p.json" <<'PY'
import json, sys
m, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert m["config"]["ranks"] == 2 and m["config"]["zero"] == 1, m["config"]
pred, meas = m["predicted"]["by_category"], m["measured"]["by_category"]
for c in ("parameters", "master_weights", "gradients", "optimizer_state"):
    assert pred[c] > 0, (c, pred[c])
assert pred == meas, (pred, meas)  # every category, to the byte
assert m["predicted"]["peak_bytes"] == m["measured"]["peak_bytes"], m["relative_error"]
assert p["predicted"]["by_category"] == pred, "the prediction without mpirun differs"
print(f"memory --ranks 2 --zero 1: optimizer state predicted {pred['optimizer_state']} B, measured "
      f"{meas['optimizer_state']} B; peak predicted {m['predicted']['peak_bytes']} B, measured "
      f"{m['measured']['peak_bytes']} B")
PY
  then pass; else fail "memory --ranks 2 --zero 1: prediction and measurement differ"; fi
else
  fail "memory --ranks 2 --zero 1 ($2 ${*:3}) failed: $(tail -c 400 "$d/err" "$d/err1")"
fi
}
check_memory_command memcmd bf16-mixed
check_memory_command memcmd-master bf16-true --update-rounding master
check_memory_command memcmd-int8 bf16-mixed --optim-state int8

# 6. One process with --zero 1 is one part: the plain run, bit for bit.
d="$TMP/single"
mkdir -p "$d"
if "$MIXTRAIN" train "${COMMON[@]}" --steps 4 --precision bf16-mixed --zero 1 --log-jsonl "$d/zero.jsonl" >/dev/null 2>"$d/err" &&
   "$MIXTRAIN" train "${COMMON[@]}" --steps 4 --precision bf16-mixed --log-jsonl "$d/plain.jsonl" >/dev/null 2>"$d/err"; then
  if msg=$(same_log "$d/zero.jsonl" "$d/plain.jsonl"); then pass; else fail "--zero 1 in one process differs from the plain run: $msg"; fi
else
  fail "--zero 1 in one process failed: $(tail -c 400 "$d/err")"
fi

# Bad input: one line naming the flag, exit 2.
expect_exit 2 "memory --ranks 0" -- "$MIXTRAIN" memory --model "$TMP/tiny.json" --ranks 0 --predict-only
expect_stderr_has "--ranks" "memory --ranks 0"
timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" --steps 1 --zero 1 --numerics "$TMP/n.jsonl" \
  >/dev/null 2>"$TMP/err"
code=$?
[ "$code" != 0 ] && [ "$code" != 124 ] && pass || fail "--zero 1 with --numerics: exit $code"
grep -q '^mixtrain: error: --numerics probes read every parameter' "$TMP/err" && pass ||
  fail "--zero 1 with --numerics: no one-line error: $(head -c 300 "$TMP/err")"
finish
