#!/usr/bin/env bash
# `mixtrain train` end to end on a tiny model: the step log and summary formats, bit-for-bit
# determinism for a fixed seed and thread count, and every kind of bad input (exit 2, one line,
# nothing half-written); a diverging fp32 run stops with exit code 3 and keeps its log.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"

write_text "$TMP/text.txt"
write_tiny_model "$TMP/tiny.json" 1 16 16
BASE=("$MIXTRAIN" --threads 2 train --model "$TMP/tiny.json" --batch-size 4 --seq-len 16)
TRAIN=("${BASE[@]}" --data "$TMP/text.txt")

expect_exit 0 "train tiny" -- "${TRAIN[@]}" --steps 6 --eval-every 3 --eval-batches 2 --log-jsonl "$TMP/a.jsonl" --json
cp "$TMP/out" "$TMP/summary.json"
if python3 - "$TMP/a.jsonl" "$TMP/summary.json" <<'PY'
import json, math, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert [l["step"] for l in lines] == [1, 2, 3, 4, 5, 6], lines
for l in lines:
    for k in ("step", "loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s"):
        assert k in l, (k, l)
    assert math.isfinite(l["loss"]) and l["tokens_per_s"] > 0
assert "val_loss" in lines[2] and "val_loss" in lines[5] and "val_loss" not in lines[0]
s = json.load(open(sys.argv[2]))
for k in ("steps", "final_train_loss", "val_loss", "tokens_per_s", "model_flops_per_s", "mfu", "peak_bytes",
          "peak_bytes_by_category"):
    assert k in s, k
assert s["steps"] == 6 and s["final_train_loss"] == lines[-1]["loss"] and s["val_loss"] == lines[-1]["val_loss"]
assert s["peak_bytes_by_category"]["parameters"] > 0 and s["peak_bytes_by_category"]["optimizer_state"] > 0
# the process over the run: its resident peak from the run's start, its size beside the tensors then
# (Linux's resident counters are cached per thread, up to 64 pages each: 1 MiB of slack)
assert s["peak_rss_from_start"] is True and s["peak_rss_bytes"] + 2**20 > s["fixed_rss_bytes"] > 0, s
assert 0 < sum(s["at_peak_by_category"].values()) <= s["peak_bytes"], s["at_peak_by_category"]
PY
then pass; else fail "step log / summary content"; fi

# Same seed, same threads: the same losses and gradient norms, bit for bit.
expect_exit 0 "train again" -- "${TRAIN[@]}" --steps 6 --eval-every 3 --eval-batches 2 --log-jsonl "$TMP/b.jsonl" --json
strip() { python3 -c "import json,sys; [print(json.dumps({k: v for k, v in json.loads(l).items() if k not in ('tokens_per_s', 'elapsed_s')})) for l in open(sys.argv[1])]" "$1"; }
if [ "$(strip "$TMP/a.jsonl")" = "$(strip "$TMP/b.jsonl")" ]; then pass; else fail "same seed gave a different trajectory"; fi
expect_exit 0 "other seed" -- "${TRAIN[@]}" --steps 6 --seed 7 --log-jsonl "$TMP/c.jsonl" --json
if [ "$(strip "$TMP/a.jsonl")" != "$(strip "$TMP/c.jsonl")" ]; then pass; else fail "another seed gave the same trajectory"; fi

# Bad input: one line naming what is wrong, exit 2.
expect_exit 2 "missing data" -- "${BASE[@]}" --steps 1 --data "$TMP/nope.txt"
expect_stderr_has "nope.txt" "missing data"
: >"$TMP/empty.txt"
expect_exit 2 "empty data" -- "${BASE[@]}" --steps 1 --data "$TMP/empty.txt"
expect_stderr_has "empty.txt" "empty data"
echo "too short" >"$TMP/short.txt"
expect_exit 2 "data shorter than a window" -- "${BASE[@]}" --steps 1 --data "$TMP/short.txt"
expect_stderr_has "short.txt" "short data"
expect_exit 2 "data is a directory" -- "${BASE[@]}" --steps 1 --data "$TMP"
expect_stderr_has "$TMP" "directory as data"
expect_exit 2 "unknown preset" -- "$MIXTRAIN" train --model gpt-huge --steps 1
expect_stderr_has "gpt-nano" "unknown preset lists the valid ones"
echo '{"n_layer": 2, "n_head": 3, "n_embd": 16}' >"$TMP/bad_heads.json"
expect_exit 2 "C not divisible by H" -- "$MIXTRAIN" train --model "$TMP/bad_heads.json" --data "$TMP/text.txt" --steps 1
expect_stderr_has "divisible" "C not divisible by H"
echo '{"n_layer": -1}' >"$TMP/negative.json"
expect_exit 2 "negative size" -- "$MIXTRAIN" train --model "$TMP/negative.json" --data "$TMP/text.txt" --steps 1
echo '{"n_layer": 2,' >"$TMP/malformed.json"
expect_exit 2 "malformed JSON" -- "$MIXTRAIN" train --model "$TMP/malformed.json" --data "$TMP/text.txt" --steps 1
expect_stderr_has "malformed.json" "malformed JSON names the file"
echo '{"n_layers": 2}' >"$TMP/unknown_key.json"
expect_exit 2 "unknown config key" -- "$MIXTRAIN" train --model "$TMP/unknown_key.json" --data "$TMP/text.txt" --steps 1
expect_exit 2 "missing config file" -- "$MIXTRAIN" train --model "$TMP/none.json" --steps 1
# The library names its options as the C++ API spells them (seq_len); the CLI says its flags.
expect_exit 2 "seq-len twice" -- "${TRAIN[@]}" --steps 1 --seq-len 17
expect_exit 2 "seq-len over block size" -- "$MIXTRAIN" --threads 2 train --model "$TMP/tiny.json" --batch-size 4 \
  --data "$TMP/text.txt" --steps 1 --seq-len 17
expect_stderr_has "error: --seq-len 17 exceeds the model's block_size 16" "seq-len over block size names the flag"
expect_exit 2 "zero steps" -- "${TRAIN[@]}" --steps 0
expect_stderr_has "error: --steps must be positive, got 0" "zero steps names the flag"
expect_exit 2 "negative lr" -- "${TRAIN[@]}" --steps 1 --lr -1
expect_stderr_has "error: --lr must be a positive number" "negative lr names the flag"
expect_exit 2 "warmup past steps" -- "${TRAIN[@]}" --steps 2 --warmup 3
expect_stderr_has "error: --warmup must be in [0, --steps]" "warmup names both flags"
expect_exit 2 "zero max-bad-steps" -- "${TRAIN[@]}" --steps 1 --max-bad-steps 0
expect_stderr_has "error: --max-bad-steps must be positive" "max-bad-steps names the flag"
expect_exit 2 "unknown optimizer" -- "${TRAIN[@]}" --steps 1 --optimizer lion
expect_exit 2 "unwritable log" -- "${TRAIN[@]}" --steps 1 --log-jsonl "$TMP/no/dir/log.jsonl"

# Divergence in fp32: an absurd learning rate without clipping makes the loss non-finite; the run
# stops naming the step, exit 3, and the log keeps every step up to it.
expect_exit 3 "non-finite loss" -- "${TRAIN[@]}" --steps 50 --lr 1e30 --grad-clip 0 --log-jsonl "$TMP/nan.jsonl"
expect_stderr_has "at step" "non-finite loss names the step"
expect_stderr_has "; lower --lr, enable --grad-clip, or use a loss scale" "divergence advice names the flags"
if python3 - "$TMP/nan.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) >= 2 and lines[-1].get("error") == "non-finite loss", lines[-1]
assert [l["step"] for l in lines] == list(range(1, len(lines) + 1))
PY
then pass; else fail "log of the diverged run"; fi

# The SGD optimizer path trains too.
expect_exit 0 "sgd" -- "${TRAIN[@]}" --steps 3 --optimizer sgd --lr 0.1 --json

# --fused-lm-head trains as the unfused head does, to the rounding of the loss's sums (fp32 and
# bf16-mixed), from the same weights and batches.
for mode in 32-true bf16-mixed; do
  expect_exit 0 "unfused head $mode" -- "${TRAIN[@]}" --steps 6 --precision "$mode" --log-jsonl "$TMP/head_u_$mode.jsonl"
  expect_exit 0 "fused head $mode" -- "${TRAIN[@]}" --steps 6 --precision "$mode" --fused-lm-head \
    --log-jsonl "$TMP/head_f_$mode.jsonl"
  if python3 "$(dirname "$0")/compare_runs.py" "$TMP/head_u_$mode.jsonl" "$TMP/head_f_$mode.jsonl" --loss-rtol 1e-5 \
    >"$TMP/cmp"; then pass; else fail "fused head $mode: $(cat "$TMP/cmp")"; fi
done

# --recompute-attention: the probabilities backward makes again are the ones forward made (the same
# GEMM and softmax on the same operands), so training is the same bit for bit: step log, weights
# and optimizer state. T = 136: three query blocks of 64, the last one partial (and no multiple of
# 32, so the AMX fused kernel, which keeps its probabilities, is not what the kept side runs).
write_tiny_model "$TMP/att.json" 2 32 136
for mode in 32-true 16-mixed bf16-mixed; do
  for side in kept recomputed; do
    flag=()
    [ "$side" = recomputed ] && flag=(--recompute-attention)
    expect_exit 0 "attention $side $mode" -- "$MIXTRAIN" --threads 2 train --model "$TMP/att.json" --batch-size 2 \
      --seq-len 136 --data "$TMP/text.txt" --steps 3 --precision "$mode" "${flag[@]}" \
      --log-jsonl "$TMP/att_${side}_$mode.jsonl" --checkpoint-dir "$TMP/att_${side}_$mode"
  done
  if python3 "$(dirname "$0")/compare_runs.py" "$TMP/att_kept_$mode.jsonl" "$TMP/att_recomputed_$mode.jsonl" \
    --loss-rtol 0 >"$TMP/cmp"; then pass; else fail "recomputed attention $mode: $(cat "$TMP/cmp")"; fi
  same_checkpoint "$TMP/att_kept_$mode/step-000003" "$TMP/att_recomputed_$mode/step-000003" \
    "recomputed attention $mode"
done
echo '{"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16, "dropout": 0.1}' >"$TMP/drop.json"
expect_exit 2 "--recompute-attention with attention dropout" -- "$MIXTRAIN" --threads 2 train --model "$TMP/drop.json" \
  --batch-size 2 --data "$TMP/text.txt" --steps 1 --recompute-attention
expect_stderr_has "--recompute-attention: attention dropout" "--recompute-attention with dropout names the flag"

finish
