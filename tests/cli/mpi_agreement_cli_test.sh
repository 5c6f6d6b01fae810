#!/usr/bin/env bash
# Ranks started with different options (an MPMD command line, a typo on one host) do not train:
# at start-up they agree on the command, every option that shapes the trajectory and the data;
# a mismatch is one line on every rank naming the option and the ranks, exit 2 (before: a
# deadlock with --zero 1 on one rank, raw MPI errors with another --precision, silently divergent
# replicas with another --lr or --seed, or train on one rank and compare on the other).
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"
use_mpirun
write_text "$TMP/text.txt"
sed 's/fox/cat/' "$TMP/text.txt" >"$TMP/other.txt"
write_tiny_model "$TMP/tiny.json" 1 16 16
COMMON=(--threads 1 train --model "$TMP/tiny.json" --batch-size 2 --seq-len 16 --steps 3)
MPMD=("${MPI_NO_LEAKS[@]}" mpirun --oversubscribe --bind-to none)

# mismatch NAME EXPECTED -- RANK0_ARGS... :: RANK1_ARGS...: exit 2, EXPECTED on both ranks' stderr.
mismatch() {
  local name="$1" expected="$2"
  shift 3
  local a=() b=()
  while [ "$1" != "::" ]; do a+=("$1"); shift; done
  shift
  b=("$@")
  timeout 60 "${MPMD[@]}" -np 1 "$MIXTRAIN" "${a[@]}" : -np 1 "$MIXTRAIN" "${b[@]}" >"$TMP/out" 2>"$TMP/err"
  local code=$?
  [ "$code" = 2 ] && pass || fail "$name: exit $code, expected 2; stderr: $(head -c 600 "$TMP/err")"
  local n
  n=$(grep -c "^mixtrain: error: .*$expected" "$TMP/err")
  [ "$n" = 2 ] && pass || fail "$name: '$expected' on $n ranks, expected both: $(head -c 600 "$TMP/err")"
  grep -q "^step\|it/s" "$TMP/out" && fail "$name: trained: $(head -c 300 "$TMP/out")" || pass
}

mismatch "--lr" "the ranks disagree on --lr: rank 1 differs from rank 0" -- \
  "${COMMON[@]}" --data "$TMP/text.txt" --lr 1e-3 :: "${COMMON[@]}" --data "$TMP/text.txt" --lr 2e-3
mismatch "--seed" "disagree on --seed" -- \
  "${COMMON[@]}" --data "$TMP/text.txt" :: "${COMMON[@]}" --data "$TMP/text.txt" --seed 7
mismatch "--zero (a deadlock before)" "disagree on --zero" -- \
  "${COMMON[@]}" --data "$TMP/text.txt" --zero 1 :: "${COMMON[@]}" --data "$TMP/text.txt"
mismatch "--precision (an MPI abort before)" "disagree on --precision" -- \
  "${COMMON[@]}" --data "$TMP/text.txt" --precision bf16-mixed :: "${COMMON[@]}" --data "$TMP/text.txt"
mismatch "another data file" "disagree on --data" -- \
  "${COMMON[@]}" --data "$TMP/text.txt" :: "${COMMON[@]}" --data "$TMP/other.txt"
mismatch "train and compare" "different commands" -- \
  "${COMMON[@]}" --data "$TMP/text.txt" :: --threads 1 compare --model "$TMP/tiny.json" --batch-size 2 --seq-len 16 \
  --steps 3 --data "$TMP/text.txt" --precisions 32-true

# The same options under other names (one copy of the data each): they agree and train.
cp "$TMP/text.txt" "$TMP/copy.txt"
if timeout 60 "${MPMD[@]}" -np 1 "$MIXTRAIN" "${COMMON[@]}" --data "$TMP/text.txt" --log-jsonl "$TMP/a.jsonl" : \
    -np 1 "$MIXTRAIN" "${COMMON[@]}" --data "$TMP/copy.txt" >"$TMP/out" 2>"$TMP/err"; then
  [ "$(wc -l <"$TMP/a.jsonl")" = 3 ] && pass || fail "agreeing ranks: the step log has not 3 lines"
else
  fail "agreeing ranks with copies of the data did not train: $(head -c 600 "$TMP/err")"
fi

finish
