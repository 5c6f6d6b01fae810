#!/usr/bin/env bash
# Data-parallel training under mpirun, 2 ranks x 1 thread (OpenMPI; CI installs it with
# scripts/setup.sh: without mpirun this test fails, it does not skip):
# - 2 ranks with --batch-size B train as one process with --grad-accum 2 --exact-grad-accum, bit
#   for bit in all five modes (step log, final weights and optimizer state); the default fused
#   accumulation is close but not equal; --verify-replicas checks after every step that both
#   ranks hold the same weights and scale (a CRC of the weights and the scale)
# - the same 2-rank run over loopback TCP gives the same step log bit for bit (deterministic sums)
# - bf16 gradient sums stay close to fp32 sums (and do differ: the option is in effect)
# - a non-finite gradient on rank 1 only: both ranks skip the step and halve the scale
# - only rank 0 writes: one summary on stdout, one step log, one set of checkpoints, one event file
# - kill -9 of one rank ends the job within 10 s; its last checkpoint resumes in one process with
#   --grad-accum 2 --exact-grad-accum on the same trajectory bit for bit; a one-process checkpoint
#   resumes on 2 ranks, bit for bit too
# - 3 ranks equal one process with --grad-accum 3 --exact-grad-accum bit for bit; 4 ranks are close
#   (OpenMPI pairs the 4 ranks' adds as a tree)
# - compare under mpirun: one table, each mode's losses as one process's
# - bad data-parallel flags: one-line errors naming the flag
# Root: OpenMPI refuses to run as root without OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM) (use_mpirun sets it).
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"
COMPARE="$(dirname "$0")/compare_runs.py"
use_mpirun
write_text "$TMP/text.txt"
write_tiny_model "$TMP/tiny.json" 2 32 32
COMMON=(--data "$TMP/text.txt" --model "$TMP/tiny.json" --batch-size 2 --threads 1)

# 2 ranks against one process with --grad-accum 2 --exact-grad-accum, which makes each
# micro-batch's gradients apart and adds them as the two ranks' sum does: the same step log bit for
# bit (every field but the timings) and the same final weights and optimizer state, byte for byte,
# in all five modes (16-true too: fp16 weights and gradients without loss scaling), and in fp8-mixed
# with delayed scaling (the ranks' amaxes reduced with max, as one process's micro-batches are: the
# same histories in the training state).
check_mode() {  # MODE [FLAGS...]
  local mode="$1" d="$TMP/$1"
  shift
  mkdir -p "$d"
  if ! timeout 60 "${MPIRUN_LEAKS[@]}" "$MIXTRAIN" train "${COMMON[@]}" --steps 6 --precision "$mode" "$@" --verify-replicas \
      --bucket-mb 0.01 --log-jsonl "$d/two.jsonl" --checkpoint-dir "$d/two" >"$d/out" 2>"$d/err"; then
    fail "$mode: 2-rank run failed: $(tail -c 400 "$d/err")"
    return
  fi
  if ! "$MIXTRAIN" train "${COMMON[@]}" --steps 6 --precision "$mode" "$@" --grad-accum 2 --exact-grad-accum \
      --log-jsonl "$d/one.jsonl" --checkpoint-dir "$d/one" >"$d/out" 2>"$d/err"; then
    fail "$mode: 1-process run failed: $(tail -c 400 "$d/err")"
    return
  fi
  local msg
  if msg=$(same_log "$d/two.jsonl" "$d/one.jsonl"); then pass; else
    fail "$mode: 2 ranks differ from one process with --grad-accum 2 --exact-grad-accum: $msg"
  fi
  same_checkpoint "$d/two/step-000006" "$d/one/step-000006" "$mode: after 6 steps, 2 ranks against one process"
}
for mode in $ALL_MODES; do check_mode "$mode"; done
check_mode fp8-mixed --fp8-first-last

# The default accumulation (fused: the second micro-batch's weight gradient lands on the first
# inside the GEMM, beta = 1) is close to the 2-rank sums but not equal: fp32 gradients differ by an
# ulp or so (measured: losses within 5e-8 relative over 6 steps, weights 3e-7). Tolerances 20x.
d="$TMP/fused"
mkdir -p "$d"
if "$MIXTRAIN" train "${COMMON[@]}" --steps 6 --grad-accum 2 --log-jsonl "$d/one.jsonl" --checkpoint-dir "$d/one" \
    >/dev/null 2>"$d/err"; then
  if python3 "$COMPARE" "$TMP/32-true/two.jsonl" "$d/one.jsonl" --loss-rtol 1e-6 --weights-atol 1e-5 --checkpoints \
      "$TMP/32-true/two/step-000006/model.safetensors" "$d/one/step-000006/model.safetensors" >"$d/cmp"; then pass; else
    fail "fused accumulation far from the 2-rank sums: $(cat "$d/cmp")"
  fi
  sed "s/^/fused --grad-accum 2 vs 2 ranks: /" "$d/cmp"
  if same_log "$TMP/32-true/two.jsonl" "$d/one.jsonl" >/dev/null; then
    fail "fused --grad-accum 2 gives the 2-rank log exactly: --exact-grad-accum is not what makes the runs agree"
  else
    pass
  fi
else
  fail "fused accumulation run: $(tail -c 400 "$d/err")"
fi

# 2 ranks x --grad-accum 2 --exact-grad-accum: each rank's earlier micro-batch goes back into a
# parameter's gradient before its bucket's sum starts, so the run is one process's with
# --grad-accum 4 --exact-grad-accum up to the order of the adds ((g0+g1)+(g2+g3) against
# ((g0+g1)+g2)+g3: losses measured 1e-8 relative apart; a bucket summed without its rank's earlier
# micro-batch would be a quarter of the gradient off).
d="$TMP/exact4"
mkdir -p "$d"
if timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" --steps 6 --grad-accum 2 --exact-grad-accum --bucket-mb 0.01 \
    --verify-replicas --log-jsonl "$d/two.jsonl" >/dev/null 2>"$d/err" &&
   "$MIXTRAIN" train "${COMMON[@]}" --steps 6 --grad-accum 4 --exact-grad-accum --log-jsonl "$d/one.jsonl" \
    >/dev/null 2>>"$d/err"; then
  if python3 "$COMPARE" "$d/two.jsonl" "$d/one.jsonl" --loss-rtol 1e-6 >"$d/cmp"; then pass; else
    fail "2 ranks x 2 exact micro-batches against one process x 4: $(cat "$d/cmp")"
  fi
  sed "s/^/2 ranks x --grad-accum 2 vs one process x 4 (exact): /" "$d/cmp"
else
  fail "2 ranks x --grad-accum 2 --exact-grad-accum: $(tail -c 400 "$d/err")"
fi

# More ranks than 2 (oversubscribed): 3 ranks add ((g0 + g1) + g2), as one process with
# --grad-accum 3 --exact-grad-accum does: bit for bit, with and without --zero 1. With 4, OpenMPI's
# reduction for a non-commutative operation keeps rank order but pairs the adds as a tree,
# (g0 + g1) + (g2 + g3), where one process adds in a line: measured 2e-8 relative apart (the
# gradient norm in the 8th digit); tolerance 1e-6. Either is deterministic run to run.
for n in 3 4; do
  d="$TMP/ranks$n"
  mkdir -p "$d"
  if timeout 60 "${MPI_NO_LEAKS[@]}" mpirun -np "$n" --oversubscribe --bind-to none "$MIXTRAIN" train "${COMMON[@]}" --steps 6 --verify-replicas \
      --bucket-mb 0.01 --log-jsonl "$d/dp.jsonl" >/dev/null 2>"$d/err" &&
     timeout 60 "${MPI_NO_LEAKS[@]}" mpirun -np "$n" --oversubscribe --bind-to none "$MIXTRAIN" train "${COMMON[@]}" --steps 6 --zero 1 \
      --verify-replicas --bucket-mb 0.01 --log-jsonl "$d/zero.jsonl" >/dev/null 2>>"$d/err" &&
     "$MIXTRAIN" train "${COMMON[@]}" --steps 6 --grad-accum "$n" --exact-grad-accum --log-jsonl "$d/one.jsonl" \
      >/dev/null 2>>"$d/err"; then
    for how in dp zero; do
      if [ "$n" = 3 ]; then
        if msg=$(same_log "$d/$how.jsonl" "$d/one.jsonl"); then pass; else fail "3 ranks ($how) against one process x 3: $msg"; fi
      elif python3 "$COMPARE" "$d/$how.jsonl" "$d/one.jsonl" --loss-rtol 1e-6 >"$d/cmp"; then
        pass
        sed "s/^/4 ranks ($how) vs one process x 4: /" "$d/cmp"
      else
        fail "4 ranks ($how) against one process x 4: $(cat "$d/cmp")"
      fi
    done
  else
    fail "$n ranks: $(tail -c 400 "$d/err")"
  fi
done

# compare under mpirun: each mode's run data parallel, one table (rank 0's), and each mode's losses
# those of one process with --grad-accum 2 --exact-grad-accum.
compare_under_mpirun "$TMP/compare" final_train_loss,val_loss 2 -- compare --data "$TMP/text.txt" --model "$TMP/tiny.json" \
  --batch-size 2 --threads 1 --steps 4 --precisions 32-true,bf16-mixed

# Deterministic: the 32-true 2-rank run again, over loopback TCP instead of shared memory, gives
# the same step log bit for bit (the sums run in rank order whatever the transport).
d="$TMP/tcp"
mkdir -p "$d"
if timeout 60 "${MPIRUN[@]}" --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    "$MIXTRAIN" train "${COMMON[@]}" --steps 6 --precision 32-true --bucket-mb 0.01 --log-jsonl "$d/log.jsonl" \
    >/dev/null 2>"$d/err"; then
  if msg=$(same_log "$d/log.jsonl" "$TMP/32-true/two.jsonl"); then pass; else
    fail "2 ranks over TCP differ from 2 ranks over shared memory: $msg"
  fi
else
  fail "2 ranks over loopback TCP: $(tail -c 400 "$d/err")"
fi

# 1 -> 2: a checkpoint of one process with --grad-accum 2 resumes with 2 ranks and continues the
# one-process trajectory of check_mode 32-true.
d="$TMP/one-to-two"
mkdir -p "$d"
if "$MIXTRAIN" train "${COMMON[@]}" --steps 6 --grad-accum 2 --exact-grad-accum --stop-after 3 --checkpoint-dir "$d/ck" \
    --log-jsonl "$d/log.jsonl" >/dev/null 2>"$d/err" &&
   timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" --steps 6 --resume "$d/ck" --verify-replicas \
    --log-jsonl "$d/log.jsonl" >/dev/null 2>"$d/err"; then
  if msg=$(same_log "$d/log.jsonl" "$TMP/32-true/one.jsonl"); then pass; else fail "1 -> 2 ranks: $msg"; fi
else
  fail "1 -> 2 ranks: $(tail -c 400 "$d/err")"
fi

# bf16 sums: close to the fp32 sums of the same 2 ranks, and not equal to them.
d="$TMP/bf16sum"
mkdir -p "$d"
if timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" --steps 6 --grad-reduce-dtype bf16 --verify-replicas \
    --log-jsonl "$d/bf16.jsonl" >/dev/null 2>"$d/err"; then
  # Each rank's gradient rounded to bf16 (2^-9 relative) before the sum: losses within 1e-2.
  if python3 "$COMPARE" "$d/bf16.jsonl" "$TMP/32-true/two.jsonl" --loss-rtol 1e-2 >"$d/cmp"; then pass; else fail "bf16 sums: $(cat "$d/cmp")"; fi
  sed "s/^/bf16 sums vs fp32 sums: /" "$d/cmp"
  if python3 "$COMPARE" "$d/bf16.jsonl" "$TMP/32-true/two.jsonl" --loss-rtol 0 >/dev/null; then
    fail "bf16 sums give exactly the fp32 trajectory: --grad-reduce-dtype bf16 had no effect"
  else
    pass
  fi
else
  fail "bf16 sums: $(tail -c 400 "$d/err")"
fi

# A non-finite gradient on rank 1 only, at step 3: both ranks skip it (cli_common.sh).
rank1_injection_skips "rank-1 injection"

# Only rank 0 writes: one JSON summary on stdout, a 4-line step log, checkpoints 2 and 4, one
# TensorBoard event file, one numerics log (each step's record of a site once).
d="$TMP/outputs"
mkdir -p "$d"
if timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" --steps 4 --json --log-jsonl "$d/log.jsonl" \
    --tensorboard "$d/tb" --checkpoint-dir "$d/ck" --save-every 2 --numerics "$d/num.jsonl" >"$d/out" 2>"$d/err"; then
  python3 -c "import json,sys; s=json.load(open('$d/out')); sys.exit(0 if s['steps']==4 else 1)" && pass ||
    fail "stdout is not one JSON summary of 4 steps: $(head -c 300 "$d/out")"
  [ "$(wc -l <"$d/log.jsonl")" = 4 ] && pass || fail "step log has $(wc -l <"$d/log.jsonl") lines, expected 4"
  [ "$(ls "$d/ck" | grep -c '^step-')" = 2 ] && pass || fail "checkpoints: $(ls "$d/ck")"
  [ "$(ls "$d/tb" | wc -l)" = 1 ] && pass || fail "TensorBoard files: $(ls "$d/tb")"
  python3 - "$d/num.jsonl" <<'PY' && pass || fail "numerics log not rank 0's alone: $(head -c 300 "$d/num.jsonl")"
import json, sys
keys = [(r["step"], r["site"], r["op"], r["kind"]) for r in map(json.loads, open(sys.argv[1]))]
assert len(keys) == len(set(keys)) and sorted({k[0] for k in keys}) == [1, 2, 3, 4], len(keys)
PY
else
  fail "outputs run failed: $(tail -c 400 "$d/err")"
fi

# kill -9 of one rank: the job ends within 10 s (no rank waits forever in a collective), and the
# last checkpoint resumes in one process with --grad-accum 2 --exact-grad-accum on the
# uninterrupted trajectory bit for bit (the log: the 2 ranks' steps up to the checkpoint, then the
# resumed ones).
d="$TMP/kill"
mkdir -p "$d"
"${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" --steps 100000 --save-every 20 --keep 2 \
  --checkpoint-dir "$d/ck" --log-jsonl "$d/log.jsonl" >"$d/out" 2>"$d/err" &
job=$!
for _ in $(seq 1 300); do  # up to 30 s for the first checkpoint
  ls "$d/ck"/step-*/manifest.json >/dev/null 2>&1 && break
  sleep 0.1
done
ranks=$(ps -o pid= --ppid "$job")  # mpirun's children: the ranks (re-executed: named "exe")
victim=$(echo "$ranks" | tail -n 1)
if [ "$(echo "$ranks" | wc -w)" != 2 ] || ! ls "$d/ck"/step-*/manifest.json >/dev/null 2>&1; then
  fail "kill test: no checkpoint or not 2 ranks (ranks: $ranks): $(tail -c 300 "$d/err")"
  kill -9 "$job" $ranks 2>/dev/null
else
  kill -9 "$victim"
  ended=""
  for i in $(seq 1 100); do
    if ! kill -0 "$job" 2>/dev/null; then ended=$i; break; fi
    sleep 0.1
  done
  if [ -z "$ended" ]; then
    fail "kill test: mpirun still runs 10 s after kill -9 of rank pid $victim"
    kill -9 "$job" $ranks 2>/dev/null
  else
    pass
    echo "kill test: the job ended $((ended / 10)).$((ended % 10)) s after kill -9 of one rank"
  fi
  wait "$job"
  code=$?
  [ "$code" != 0 ] && pass || fail "kill test: mpirun exited 0 after a rank was killed"
  # Every rank gone too (a zombie waiting for init to reap it counts as gone), within 3 s.
  alive() { for p in $ranks; do ps -o stat= -p "$p" 2>/dev/null | grep -qv '^Z' && echo "$p"; done; }
  for _ in $(seq 1 30); do [ -z "$(alive)" ] && break; sleep 0.1; done
  left=$(alive)
  if [ -n "$left" ]; then fail "kill test: rank pids $left survived mpirun"; kill -9 $left; else pass; fi
  # Resume in one process (--grad-accum 2 = 2 ranks x 1) for 5 more steps; compare with one
  # uninterrupted process.
  last=$(ls "$d/ck" | grep '^step-' | sort | tail -n 1)
  step=$((10#${last#step-}))
  stop=$((step + 5))
  if "$MIXTRAIN" train "${COMMON[@]}" --steps 100000 --grad-accum 2 --exact-grad-accum --resume "$d/ck" \
      --stop-after "$stop" --log-jsonl "$d/log.jsonl" >/dev/null 2>"$d/err2" &&
     "$MIXTRAIN" train "${COMMON[@]}" --steps 100000 --grad-accum 2 --exact-grad-accum --stop-after "$stop" \
      --log-jsonl "$d/ref.jsonl" >/dev/null 2>"$d/err3"; then
    if msg=$(same_log "$d/log.jsonl" "$d/ref.jsonl"); then pass; else fail "resume after kill from $last: $msg"; fi
  else
    fail "resume after kill: $(tail -c 400 "$d/err2" "$d/err3")"
  fi
fi

# Flags: one line naming the flag.
expect_exit 2 "bad --grad-reduce-dtype" -- "$MIXTRAIN" train "${COMMON[@]}" --steps 1 --grad-reduce-dtype fp64
expect_stderr_has "--grad-reduce-dtype" "bad --grad-reduce-dtype"
expect_exit 2 "bad --bucket-mb" -- "$MIXTRAIN" train "${COMMON[@]}" --steps 1 --bucket-mb 0
expect_stderr_has "--bucket-mb" "bad --bucket-mb"
# Under mpirun every rank says it, and mpirun adds its own report of the abort.
expect_mpi_error "bf16 sums of fp16 gradients" '--grad-reduce-dtype bf16 needs fp32 or bf16 gradients' -- \
  timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" --steps 1 --precision 16-true --grad-reduce-dtype bf16
finish
