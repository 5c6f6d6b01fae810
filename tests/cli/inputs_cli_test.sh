#!/usr/bin/env bash
# Bounded and validated input: data files regular and under --max-data-bytes, model JSON without
# duplicate keys or deep nesting, a named checkpoint without its manifest refused, a model that
# cannot fit refused before allocating; the cosine schedule's first step at the peak; every option checked with the flag's name, 0 or empty
# values that would silently mean "unset" refused, options without effect warned about.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"

write_text "$TMP/text.txt"
write_tiny_model "$TMP/tiny.json" 1 16 16
TRAIN=("$MIXTRAIN" --threads 2 train --model "$TMP/tiny.json" --batch-size 4 --seq-len 16 --data "$TMP/text.txt")
NOSEQ=("$MIXTRAIN" --threads 2 train --model "$TMP/tiny.json" --batch-size 4 --data "$TMP/text.txt")
# train_with MODEL DATA BATCH ARGS...: options that TRAIN fixes, chosen (CLI11 refuses a repeat).
train_with() {
  local model="$1" data="$2" batch="$3"
  shift 3
  "$MIXTRAIN" --threads 2 train --model "$model" --data "$data" --batch-size "$batch" --seq-len 16 "$@"
}

# Data: regular files, or a stream (stdin, FIFO, device: it could be endless or block) only with an
# explicit --max-data-bytes; the limit named.
expect_exit 2 "data from /dev/zero" -- timeout 30 "$MIXTRAIN" --threads 2 train --model "$TMP/tiny.json" --data /dev/zero --steps 1
expect_stderr_has "/dev/zero is not a regular file" "data from /dev/zero"
expect_stderr_has "--max-data-bytes" "data from /dev/zero says how to read a stream"
expect_exit 2 "data from /dev/zero with a cap" -- timeout 30 "$MIXTRAIN" --threads 2 train --model "$TMP/tiny.json" \
  --data /dev/zero --steps 1 --max-data-bytes 1000000
expect_stderr_has "over the --max-data-bytes limit of 1000000" "data from /dev/zero with a cap"
# A stream with an explicit cap: stdin ("-") and a FIFO with a writer train like the file.
STREAM=("$MIXTRAIN" --threads 2 train --model "$TMP/tiny.json" --batch-size 4 --seq-len 16 --steps 2 --max-data-bytes 100000)
expect_exit 0 "data from stdin with a cap" -- bash -c '"$@" <"$0"' "$TMP/text.txt" "${STREAM[@]}" --data - --json
python3 -c "import json,sys; assert json.load(open(sys.argv[1]))['steps'] == 2" "$TMP/out" && pass || fail "data from stdin"
mkfifo "$TMP/data.fifo"
cat "$TMP/text.txt" >"$TMP/data.fifo" &
expect_exit 0 "data from a FIFO with a cap" -- timeout 30 "${STREAM[@]}" --data "$TMP/data.fifo"
mkfifo "$TMP/fifo"
expect_exit 2 "data from a FIFO without a writer" -- timeout 30 "$MIXTRAIN" --threads 2 train --model "$TMP/tiny.json" --data "$TMP/fifo" --steps 1
expect_stderr_has "not a regular file" "data from a FIFO"
expect_exit 2 "data over the size limit" -- "${TRAIN[@]}" --steps 1 --max-data-bytes 1000
expect_stderr_has "over the --max-data-bytes limit of 1000" "data over the size limit"

# Model JSON: duplicate keys and deep nesting refused (as the README promises).
echo '{"n_layer": 1, "n_layer": 2, "n_head": 2, "n_embd": 16, "block_size": 16}' >"$TMP/dup.json"
expect_exit 2 "model JSON with a duplicate key" -- train_with "$TMP/dup.json" "$TMP/text.txt" 4 --steps 1
expect_stderr_has "duplicate key 'n_layer'" "model JSON with a duplicate key"
python3 -c "print('[' * 100000 + ']' * 100000)" >"$TMP/deep.json"
expect_exit 2 "model JSON nested 100000 deep" -- train_with "$TMP/deep.json" "$TMP/text.txt" 4 --steps 1
expect_stderr_has "deeper than 64 levels" "model JSON nested deep"

# A model that cannot fit: refused up front with the predicted and available sizes.
echo '{"n_layer": 64, "n_head": 64, "n_embd": 65536, "block_size": 1024}' >"$TMP/huge.json"
expect_exit 2 "model larger than memory" -- train_with "$TMP/huge.json" "$TMP/text.txt" 4 --steps 1
expect_stderr_has "is available; --force" "model larger than memory"
expect_exit 2 "over --memory-limit" -- "${TRAIN[@]}" --steps 2 --memory-limit 4096
expect_stderr_has "(predicted peak) but --memory-limit allows 4096 bytes; --force tries anyway" "over --memory-limit"
expect_exit 0 "--memory-limit above the peak" -- "${TRAIN[@]}" --steps 2 --memory-limit 1000000000000

# OMP_NUM_THREADS, when it sets the thread count, is checked as --threads is (100000 crashed,
# 20000 hung); --threads overrides it.
NOTHREADS=("$MIXTRAIN" train --model "$TMP/tiny.json" --batch-size 4 --seq-len 16 --data "$TMP/text.txt" --steps 1)
for v in 100000 20000; do
  OMP_NUM_THREADS="$v" expect_exit 2 "OMP_NUM_THREADS=$v" -- timeout 60 "${NOTHREADS[@]}"
  expect_stderr_has "OMP_NUM_THREADS='$v' must be a thread count in [1, 4096]" "OMP_NUM_THREADS=$v"
done
# (libgomp itself warns about these on stderr before mixtrain starts, and would ignore them.)
for v in 0 abc -3; do
  OMP_NUM_THREADS="$v" timeout 60 "${NOTHREADS[@]}" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ "$rc" = 2 ] && grep -qF "mixtrain: error: OMP_NUM_THREADS='$v' must be a thread count" "$TMP/err" && pass ||
    fail "OMP_NUM_THREADS=$v: exit $rc: $(head -c 300 "$TMP/err")"
done
OMP_NUM_THREADS=100000 expect_exit 0 "OMP_NUM_THREADS=100000 with --threads 2" -- timeout 60 "${NOTHREADS[@]}" --threads 2
OMP_NUM_THREADS=2,1 expect_exit 0 "OMP_NUM_THREADS=2,1 (a nested list)" -- timeout 60 "${NOTHREADS[@]}"

# --resume of a named checkpoint missing its manifest: exit 2, not a fresh start.
expect_exit 0 "a checkpoint" -- "${TRAIN[@]}" --steps 2 --checkpoint-dir "$TMP/ck"
rm "$TMP/ck/step-000002/manifest.json"
expect_exit 2 "resume a checkpoint without manifest" -- "${TRAIN[@]}" --steps 4 --resume "$TMP/ck/step-000002"
expect_stderr_has "no manifest.json" "resume a checkpoint without manifest"

# 0 / empty values that would mean "unset", and out-of-range values, named by their flag.
expect_exit 2 "--seq-len 0" -- "${NOSEQ[@]}" --steps 1 --seq-len 0
expect_stderr_has "--seq-len must be positive" "--seq-len 0"
expect_exit 2 "--stop-after 0" -- "${TRAIN[@]}" --steps 2 --stop-after 0
expect_stderr_has "--stop-after" "--stop-after 0"
for flag in --checkpoint-dir --log-jsonl --data --resume --init-from; do
  if [ "$flag" = --data ]; then cmd=(train_with "$TMP/tiny.json" "" 4); else cmd=("${TRAIN[@]}" "$flag" ""); fi
  expect_exit 2 "$flag ''" -- "${cmd[@]}" --steps 1
  expect_stderr_has "$flag: empty path" "$flag ''"
done
# ... and the ones that meant "unset" or were clamped: --save-every 0, --max-data-bytes 0, an
# integer past 64 bits (it became INT64_MAX steps), --min-seconds nan.
expect_exit 2 "--save-every 0" -- "${TRAIN[@]}" --steps 2 --checkpoint-dir "$TMP/ck0" --save-every 0
expect_stderr_has "--save-every must be a step count >= 1, got 0" "--save-every 0"
expect_exit 2 "--max-data-bytes 0" -- "${TRAIN[@]}" --steps 1 --max-data-bytes 0
expect_stderr_has "--max-data-bytes must be a byte count >= 1, got 0" "--max-data-bytes 0"
expect_exit 2 "--steps past 64 bits" -- timeout 60 "${TRAIN[@]}" --steps 99999999999999999999
expect_stderr_has "99999999999999999999 does not fit in 64 bits" "--steps past 64 bits"
expect_exit 2 "--seed past 64 bits" -- "${TRAIN[@]}" --steps 1 --seed 99999999999999999999
expect_exit 2 "bench gemm --min-seconds nan" -- "$MIXTRAIN" bench gemm --min-seconds nan
expect_stderr_has "--min-seconds must be a number in [0.01, 60]" "bench gemm --min-seconds nan"
expect_exit 2 "--seed -1" -- "${TRAIN[@]}" --steps 1 --seed -1
expect_stderr_has "--seed" "--seed -1"
expect_exit 2 "--beta2 2" -- "${TRAIN[@]}" --steps 1 --beta2 2
expect_stderr_has "--beta2 must be in [0, 1)" "--beta2 2"
expect_exit 2 "--min-lr-ratio 2" -- "${TRAIN[@]}" --steps 1 --min-lr-ratio 2
expect_stderr_has "--min-lr-ratio must be in [0, 1]" "--min-lr-ratio 2"
expect_exit 2 "--batch-size 2^21" -- train_with "$TMP/tiny.json" "$TMP/text.txt" 2097152 --steps 1
expect_stderr_has "--batch-size must be at most" "--batch-size 2^21"
if grep -qE "AdamW|LrSchedule|TextCorpus::|basic_filebuf" "$TMP/err"; then fail "a message names an internal class"; else pass; fi

# Options without effect: warned about, naming the flag; the run goes on.
expect_exit 0 "options without effect" -- "${TRAIN[@]}" --steps 2 --update-rounding kahan --momentum 0.5 \
  --inject-nonfinite 9 --init-scale 4
for w in "--update-rounding has no effect" "--momentum has no effect" "--inject-nonfinite step 9 has no effect" \
  "--init-scale has no effect"; do
  expect_stderr_has "warning: $w" "warning for $w"
done
expect_exit 0 "sgd with a beta" -- "${TRAIN[@]}" --steps 1 --optimizer sgd --beta1 0.8
expect_stderr_has "warning: --beta1 has no effect" "--beta1 with sgd"
expect_exit 0 "an effective --update-rounding is not warned about" -- "${TRAIN[@]}" --steps 1 --precision bf16-true \
  --update-rounding kahan
if grep -q "warning" "$TMP/err"; then fail "warned about an effective option: $(cat "$TMP/err")"; else pass; fi

# compare: a duplicated mode refused; speed-ups relative to the first listed mode without 32-true.
expect_exit 2 "compare duplicate" -- "$MIXTRAIN" compare --model "$TMP/tiny.json" --data "$TMP/text.txt" --steps 1 \
  --precisions 32-true,bf16-mixed,32-true
expect_stderr_has "32-true is listed twice" "compare duplicate"
expect_exit 0 "compare without 32-true" -- "$MIXTRAIN" --threads 2 compare --model "$TMP/tiny.json" --data "$TMP/text.txt" \
  --batch-size 4 --seq-len 16 --steps 1 --precisions bf16-mixed,16-mixed
grep -q "speed-up relative to bf16-mixed" "$TMP/out" && pass || fail "compare does not say its baseline"
if grep -q "0.00x" "$TMP/out"; then fail "compare printed 0.00x: $(cat "$TMP/out")"; else pass; fi
grep -qE "^bf16-mixed +[0-9]+ +1.00x" "$TMP/out" && pass || fail "the baseline row is not 1.00x: $(cat "$TMP/out")"

# The cosine schedule without warm-up gives step 1 the peak (PyTorch, Hugging Face), the last the floor.
expect_exit 0 "cosine, no warm-up" -- "${TRAIN[@]}" --steps 4 --lr 1e-3 --min-lr-ratio 0.1 --log-jsonl "$TMP/cos.jsonl"
python3 - "$TMP/cos.jsonl" <<'PY' && pass || fail "cosine schedule: $(cat "$TMP/cos.jsonl" | head -c 400)"
import json, math, sys
lr = [json.loads(l)["lr"] for l in open(sys.argv[1])]
want = [1e-3, 1e-4 + 0.5 * (1 + math.cos(math.pi / 3)) * 9e-4, 1e-4 + 0.5 * (1 + math.cos(2 * math.pi / 3)) * 9e-4, 1e-4]
assert all(abs(a - b) <= 1e-6 * b for a, b in zip(lr, want)) and len(lr) == 4, (lr, want)
PY


# A path with a newline or an escape sequence is printed escaped: the error stays one line and
# cannot rewrite the terminal.
expect_exit 2 "a path with a newline and ESC" -- "$MIXTRAIN" --threads 2 train --model "$TMP/tiny.json" --steps 1 \
  --data "$TMP/no"$'\n'"such"$'\e'"[2J.txt"
expect_stderr_has 'no\nsuch\x1b[2J.txt' "a path with a newline and ESC"
grep -q $'\e' "$TMP/err" && fail "an ESC byte reached stderr" || pass


# The real error alone: no warning about --eval-every before "--steps must be positive"; a static
# loss scale past fp32 is named as --loss-scale (it was blamed on --init-scale).
expect_exit 2 "--steps -1" -- "${TRAIN[@]}" --steps -1
grep -q "warning" "$TMP/err" && fail "--steps -1: a warning before the error: $(cat "$TMP/err")" || pass
expect_stderr_has "--steps must be positive" "--steps -1"
expect_exit 2 "--loss-scale past fp32" -- "${TRAIN[@]}" --steps 1 --precision 16-mixed --loss-scale 1e39
expect_stderr_has "--loss-scale must be finite in fp32" "--loss-scale past fp32"
grep -q -- "--init-scale" "$TMP/err" && fail "--loss-scale 1e39 blamed on --init-scale" || pass

finish
