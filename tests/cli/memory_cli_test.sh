#!/usr/bin/env bash
# `mixtrain memory`: the predicted-vs-measured table and its JSON, --predict-only (nothing trained,
# big shapes answered at once), and bad input (exit 2, one line, no JSON written).
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"

write_tiny_model "$TMP/tiny.json" 2 32 32

# Predicted and measured side by side (a tiny model, 2 steps), then the JSON.
expect_exit 0 "memory, measured" -- "$MIXTRAIN" --threads 2 memory --model "$TMP/tiny.json" --precision bf16-mixed \
  --batch-size 4 --seq-len 32 --steps 2 --json "$TMP/m.json"
cp "$TMP/out" "$TMP/m.txt"
for text in "predicted MiB" "measured MiB" "error" "master_weights" "activations" "peak total" "process peak RSS" \
  "alive at the predicted peak"; do
  grep -qF -- "$text" "$TMP/m.txt" && pass || fail "table lacks '$text': $(head -c 600 "$TMP/m.txt")"
done
if python3 - "$TMP/m.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
cats = ["parameters", "master_weights", "gradients", "optimizer_state", "activations", "workspace", "cast_cache", "quantized_weights", "fp8",
        "data", "other"]
for side in ("predicted", "measured"):
    assert list(j[side]["by_category"]) == cats, j[side]
    assert j[side]["peak_bytes"] > 0
    # the peak of the sum is at most the sum of the per-category peaks
    assert j[side]["peak_bytes"] <= sum(j[side]["by_category"].values())
assert j["process_peak_rss_bytes"] >= j["measured"]["peak_bytes"]
assert j["config"]["precision"] == "bf16-mixed" and j["config"]["batch_size"] == 4 and j["config"]["seq_len"] == 32
assert abs(j["relative_error"]["peak_bytes"]) < 0.1, j["relative_error"]
for c in ("master_weights", "parameters", "gradients", "optimizer_state", "activations"):
    p, m = j["predicted"]["by_category"][c], j["measured"]["by_category"][c]
    assert m > 0 and abs(p - m) <= 0.1 * m, (c, p, m)
assert j["predicted"]["terms"] and {"name", "category", "count", "bytes"} <= set(j["predicted"]["terms"][0])
assert "step" in j["predicted"]["peak_moment"]
PY
then pass; else fail "memory JSON content"; fi

# --predict-only: no training (gpt2-small at batch 8, seq 1024 answers at once), JSON without
# measurements; the same prediction as the measured run's.
start=$(date +%s)
expect_exit 0 "predict-only gpt2-small" -- "$MIXTRAIN" memory --model gpt2-small --precision bf16-mixed \
  --batch-size 8 --seq-len 1024 --checkpoint-activations --predict-only --json "$TMP/p.json"
[ $(($(date +%s) - start)) -lt 20 ] && pass || fail "--predict-only took too long (did it train?)"
grep -q "measured MiB" "$TMP/out" && fail "--predict-only printed measurements" || pass
if python3 - "$TMP/p.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["measured"] is None and j["process_peak_rss_bytes"] is None
assert j["parameters"] == 124439808
assert 0 < j["predicted"]["peak_bytes"] < 24 * 2**30, j["predicted"]["peak_bytes"]
assert j["config"]["checkpoint_activations"] is True
PY
then pass; else fail "predict-only JSON content"; fi
expect_exit 0 "predict-only tiny" -- "$MIXTRAIN" --threads 2 memory --model "$TMP/tiny.json" --precision bf16-mixed \
  --batch-size 4 --seq-len 32 --steps 2 --predict-only --json "$TMP/p2.json"
python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); assert a['predicted']['by_category']==b['predicted']['by_category']" \
  "$TMP/m.json" "$TMP/p2.json" && pass || fail "--predict-only predicts differently"

# --exact-grad-accum makes the second micro-batch's gradient of each parameter apart and adds it
# when final: predicted and measured alike, the gradients category grows by what is in progress at
# a time (here GPT's tied embedding, written first and final last), less than a second buffer.
expect_exit 0 "memory, exact accumulation" -- "$MIXTRAIN" --threads 2 memory --model "$TMP/tiny.json" --precision bf16-mixed \
  --batch-size 4 --seq-len 32 --steps 2 --grad-accum 2 --exact-grad-accum --json "$TMP/exact.json"
grep -qF "micro-batch gradient" "$TMP/out" && pass || fail "the micro-batch gradients are not named: $(head -c 600 "$TMP/out")"
python3 - "$TMP/m.json" "$TMP/exact.json" <<'PY' && pass || fail "exact accumulation's gradient memory"
import json, sys
fused, exact = (json.load(open(p)) for p in sys.argv[1:])
for side in ("predicted", "measured"):
    g, e = fused[side]["by_category"]["gradients"], exact[side]["by_category"]["gradients"]
    assert g < e < 2 * g, (side, g, e)
assert exact["predicted"]["by_category"] == exact["measured"]["by_category"], exact
PY

# Bad input: one line, exit 2, no JSON file.
expect_exit 2 "unknown preset" -- "$MIXTRAIN" memory --model gpt-huge --predict-only --json "$TMP/bad.json"
expect_stderr_has "unknown model preset 'gpt-huge'" "unknown preset"
expect_exit 2 "seq-len over block size" -- "$MIXTRAIN" memory --model gpt-nano --seq-len 129 --predict-only
expect_stderr_has "exceeds the model's block_size" "seq-len over block size"
expect_exit 2 "zero batch" -- "$MIXTRAIN" memory --model gpt-nano --batch-size 0 --predict-only
expect_stderr_has "error: --batch-size must be positive, got 0" "zero batch names the flag"
expect_exit 2 "negative seq-len" -- "$MIXTRAIN" memory --model gpt-nano --seq-len -3 --predict-only
expect_exit 2 "impossible batch" -- "$MIXTRAIN" memory --model gpt2-small --batch-size 100000000000 --predict-only
expect_stderr_has "error: --batch-size must be at most 2^20 (1048576), got 100000000000" "impossible batch names the flag"
expect_exit 2 "bad precision" -- "$MIXTRAIN" memory --model gpt-nano --precision fp4-mixed --predict-only
expect_exit 2 "bad optimizer" -- "$MIXTRAIN" memory --model gpt-nano --optimizer lion --predict-only
expect_exit 2 "bad rounding" -- "$MIXTRAIN" memory --model gpt-nano --update-rounding up --predict-only
echo '{"n_layer": 2, "n_head": 3, "n_embd": 32}' >"$TMP/heads.json"
expect_exit 2 "heads do not divide" -- "$MIXTRAIN" memory --model "$TMP/heads.json" --predict-only
expect_stderr_has "not divisible" "heads do not divide"
expect_exit 2 "missing config" -- "$MIXTRAIN" memory --model "$TMP/nope.json" --predict-only
expect_exit 2 "unwritable --json" -- "$MIXTRAIN" memory --model gpt-nano --predict-only --json "$TMP/no/dir/x.json"
[ ! -e "$TMP/bad.json" ] && pass || fail "a JSON file was written for bad input"

# --json checked before anything runs: a directory, or the model config itself, is refused with
# one line naming the flag, and the config is left as it was.
mkdir -p "$TMP/outdir"
expect_exit 2 "memory --json into a directory" -- "$MIXTRAIN" --threads 2 memory --model "$TMP/tiny.json" \
  --batch-size 4 --seq-len 32 --steps 2 --json "$TMP/outdir"
expect_stderr_has "--json" "memory --json into a directory"
cp "$TMP/tiny.json" "$TMP/tiny.before"
expect_exit 2 "memory --json over its model config" -- "$MIXTRAIN" --threads 2 memory --model "$TMP/tiny.json" \
  --batch-size 4 --seq-len 32 --steps 2 --json "$TMP/tiny.json"
cmp -s "$TMP/tiny.json" "$TMP/tiny.before" && pass || fail "memory --json over the model config changed it"


# The prediction's own cost does not grow with the batch (no per-row host work or metadata on the
# meta device): batch 65536 of gpt2-small answers in seconds (it took minutes and gigabytes), and
# its activations are 256 times those of batch 256 (to 1e-6: a few buffers do not scale).
start=$(date +%s)
expect_exit 0 "predict-only batch 65536" -- "$MIXTRAIN" memory --model gpt2-small --batch-size 65536 --seq-len 1024 \
  --predict-only --json "$TMP/big.json"
[ $(($(date +%s) - start)) -lt 15 ] && pass || fail "--predict-only at batch 65536 took $(($(date +%s) - start)) s"
expect_exit 0 "predict-only batch 256" -- "$MIXTRAIN" memory --model gpt2-small --batch-size 256 --seq-len 1024 \
  --predict-only --json "$TMP/small.json"
python3 - "$TMP/small.json" "$TMP/big.json" <<'PY' && pass || fail "the batch-65536 prediction does not scale"
import json, sys
a, b = (json.load(open(p))["predicted"]["by_category"] for p in sys.argv[1:3])
assert abs(b["activations"] / a["activations"] - 256) < 1e-6, (a["activations"], b["activations"])
PY

# memory_pair FLAG OUT ARGS...: `memory --json` (bf16-mixed, 2 steps) with ARGS, without FLAG to
# OUT.off.json and with it to OUT.on.json; each predicted to the byte as measured.
memory_pair() {
  local flag="$1" out="$2" side extra
  shift 2
  for side in off on; do
    extra=()
    [ "$side" = on ] && extra=("$flag")
    expect_exit 0 "memory $* ${extra[*]}" -- "$MIXTRAIN" --threads 2 memory --precision bf16-mixed --steps 2 "$@" \
      "${extra[@]}" --json "$out.$side.json"
    python3 - "$out.$side.json" <<'PY' && pass || fail "memory $* ${extra[*]}: prediction != measurement"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["predicted"]["peak_bytes"] == j["measured"]["peak_bytes"], (j["predicted"]["peak_bytes"], j["measured"]["peak_bytes"])
assert j["predicted"]["by_category"] == j["measured"]["by_category"]
PY
  done
}

# --fused-lm-head: the head's logits (B, T, V) never whole, nor their gradient (the unfused head
# holds both, in bf16: the loss reads the 16-bit logits); predicted to the byte as measured, and the
# peak lower by about the logits' bytes (chunks of 8 Mi logits: 256 rows of 512 here) less the
# gradients forward makes for backward (with --grad-accum 2 backward scales them by 1/2: in place,
# so the prediction, which has no values, still matches).
echo '{"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32, "vocab_size": 32768}' >"$TMP/wide.json"
memory_pair --fused-lm-head "$TMP/head" --model "$TMP/wide.json" --batch-size 16 --seq-len 32 --grad-accum 2
python3 - "$TMP/head.off.json" "$TMP/head.on.json" <<'PY' && pass || fail "fused head memory"
import json, sys
u, f = (json.load(open(p)) for p in sys.argv[1:3])
assert f["config"]["fused_lm_head"] is True and u["config"]["fused_lm_head"] is False
logits16 = 16 * 32 * 32768 * 2
p_u, p_f = u["measured"]["peak_bytes"], f["measured"]["peak_bytes"]
# less what the fused head keeps from forward to backward: dW in fp32 (V x C), dx (N x C)
assert p_u - p_f >= 0.85 * logits16, (p_u, p_f, logits16)
PY

# --recompute-attention: no probability blocks kept (3 layers, batch 4 x 2 heads, T = 320: query
# blocks of 64 on every CPU past T = 256, each block's rows seeing keys up to its end), predicted to
# the byte as measured; the peak (backward's start, where every layer's saved tensors live) lower by
# the blocks' bytes less the one block backward makes again at a time (its chunk holds all 8 heads).
echo '{"n_layer": 3, "n_head": 2, "n_embd": 32, "block_size": 320}' >"$TMP/long.json"
memory_pair --recompute-attention "$TMP/att" --model "$TMP/long.json" --batch-size 4 --seq-len 320
python3 - "$TMP/att.off.json" "$TMP/att.on.json" <<'PY' && pass || fail "recomputed attention memory"
import json, sys
k, r = (json.load(open(p)) for p in sys.argv[1:3])
assert r["config"]["recompute_attention"] is True and k["config"]["recompute_attention"] is False
probs = 3 * 4 * 2 * sum(64 * r1 for r1 in range(64, 321, 64)) * 2  # layers x heads x lower blocks, bf16
p_k, p_r = k["measured"]["peak_bytes"], r["measured"]["peak_bytes"]
assert p_k - p_r >= probs - 8 * 64 * 320 * 2, (p_k, p_r, probs)
PY

finish
