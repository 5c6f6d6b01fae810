#!/usr/bin/env bash
# `mixtrain quantize`, `evaluate` and the quantized model in `classify` and `sample`, end to end:
# a tiny fine-tuned BERT (the encoder fixture's bert_tiny, a few steps) quantized in each scheme
# to a compressed-tensors directory that classify and evaluate load (bf16 around the quantized
# layers), the side-by-side table, a tiny GPT checkpoint quantized and sampled from; bad input is
# one line, exit 2, and nothing is overwritten or half-written.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"
SRC="${MIXTRAIN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"

write_tiny_encoder_task "$SRC" "$TMP"  # $TMP/model, $TMP/train.tsv, $TMP/test.tsv
expect_exit 0 "fine-tune" -- "$MIXTRAIN" --threads 1 finetune --model "$TMP/model" --train "$TMP/train.tsv" \
  --test "$TMP/test.tsv" --max-len 16 --batch-size 8 --lr 1e-2 --epochs 2 --pooling mean --save "$TMP/saved"

for s in int8-dynamic int8-weight fp8; do
  expect_exit 0 "quantize $s" -- "$MIXTRAIN" --threads 1 quantize --checkpoint "$TMP/saved" --scheme "$s" \
    --output "$TMP/q-$s" --json "$TMP/q-$s.json"
  python3 - "$TMP/q-$s" "$s" "$TMP/q-$s.json" <<'PY' && pass || fail "quantize $s: directory"
import json, os, struct, sys
d, s, summary = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
cfg = json.load(open(os.path.join(d, "config.json")))
q = cfg["quantization_config"]
assert q["quant_method"] == "compressed-tensors" and q["mixtrain_scheme"] == s, q
assert os.path.exists(os.path.join(d, "vocab.txt"))
b = open(os.path.join(d, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
w = h["bert.encoder.layer.0.output.dense.weight"]
assert w["dtype"] == ("F8_E4M3" if s == "fp8" else "I8"), w
assert h["bert.encoder.layer.0.output.dense.weight_scale"]["shape"] == [w["shape"][0], 1]
assert h["classifier.weight"]["dtype"] == "BF16"
assert summary["file_bytes"] == os.path.getsize(os.path.join(d, "model.safetensors")), summary
assert summary["quantized_elements"] > summary["other_elements"] > 0, summary
PY
done
expect_exit 0 "classify a quantized model" -- "$MIXTRAIN" --threads 1 classify --checkpoint "$TMP/q-int8-dynamic" \
  --text "the food was good" --json
python3 -c "import json,sys; j=json.loads(open(sys.argv[1]).readline()); assert j['label'] in ('negative','neutral','positive') and abs(sum(j['probabilities'].values())-1) < 1e-6, j" \
  "$TMP/out" && pass || fail "classify output: $(cat "$TMP/out")"
expect_exit 0 "evaluate fp32" -- "$MIXTRAIN" --threads 1 evaluate --checkpoint "$TMP/saved" --test "$TMP/test.tsv" \
  --max-len 16 --json "$TMP/e-fp32.json"
expect_exit 0 "evaluate int8-dynamic" -- "$MIXTRAIN" --threads 1 evaluate --checkpoint "$TMP/q-int8-dynamic" \
  --test "$TMP/test.tsv" --max-len 16 --json "$TMP/e-int8.json"
python3 - "$TMP/e-fp32.json" "$TMP/e-int8.json" <<'PY' && pass || fail "evaluate JSON"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["dtype"] == "f32" and a["scheme"] == "none" and b["dtype"] == "bf16" and b["scheme"] == "int8-dynamic", (a, b)
assert a["test_examples"] == b["test_examples"] == 40, (a, b)
assert abs(a["test_accuracy"] - b["test_accuracy"]) <= 0.1, (a, b)
PY
grep -q "test accuracy" <("$MIXTRAIN" --threads 1 evaluate --checkpoint "$TMP/saved" --test "$TMP/test.tsv" --max-len 16) \
  && pass || fail "evaluate prints the accuracy"

# The side-by-side table: fp32, bf16, then each scheme; the 8-bit files under 0.75x a bf16 file's
# size (this tiny model's head, biases and layer norms are a larger share than MiniLM's).
expect_exit 0 "quantize --compare" -- "$MIXTRAIN" --threads 1 quantize --compare --checkpoint "$TMP/saved" \
  --test "$TMP/test.tsv" --max-len 16 --requests 5 --batch 16 --json "$TMP/cmp.json"
grep -q "int8-dynamic" "$TMP/out" && pass || fail "compare table: $(cat "$TMP/out")"
python3 - "$TMP/cmp.json" <<'PY' && pass || fail "compare JSON"
import json, sys
j = json.load(open(sys.argv[1]))
rows = {r["name"]: r for r in j["rows"]}
assert list(rows) == ["fp32", "bf16", "int8-dynamic", "int8-weight", "fp8"], list(rows)
for r in rows.values():
    assert r["test_examples"] == 40 and 0 <= r["test_accuracy"] <= 1 and r["throughput_examples_per_s"] > 0, r
    assert 0 < r["latency_p50_ms"] <= r["latency_p99_ms"] and r["peak_bytes"] >= r["weight_bytes"] > 0, r
assert rows["fp32"]["file_bytes"] == rows["bf16"]["file_bytes"]
assert rows["int8-dynamic"]["weight_bytes"] < rows["bf16"]["weight_bytes"] < rows["fp32"]["weight_bytes"], rows
bf16_file = rows["fp32"]["file_bytes"] / 2  # the saved model is fp32
assert rows["int8-dynamic"]["file_bytes"] < 0.75 * bf16_file and rows["fp8"]["file_bytes"] < 0.75 * bf16_file, rows
PY
ls "$TMP" | grep -q partial && fail "a half-written directory was left" || pass

# Refusals: one line, exit 2, nothing overwritten.
stamp=$(stat -c %Y "$TMP/q-fp8/model.safetensors")
expect_exit 2 "--output exists" -- "$MIXTRAIN" quantize --checkpoint "$TMP/saved" --scheme fp8 --output "$TMP/q-fp8"
expect_stderr_has "exists" "--output exists"
[ "$(stat -c %Y "$TMP/q-fp8/model.safetensors")" = "$stamp" ] && pass || fail "an existing --output was rewritten"
expect_exit 2 "unknown scheme" -- "$MIXTRAIN" quantize --checkpoint "$TMP/saved" --scheme int4 --output "$TMP/q4"
expect_stderr_has "int8-dynamic, int8-weight, fp8" "unknown scheme"
expect_exit 2 "quantize a quantized model" -- "$MIXTRAIN" quantize --checkpoint "$TMP/q-fp8" --scheme fp8 --output "$TMP/qq"
expect_exit 2 "no --output" -- "$MIXTRAIN" quantize --checkpoint "$TMP/saved" --scheme fp8
expect_exit 2 "fine-tune a quantized model" -- "$MIXTRAIN" --threads 1 finetune --model "$TMP/q-int8-dynamic" \
  --train "$TMP/train.tsv" --test "$TMP/test.tsv" --max-len 16 --steps 1
expect_stderr_has "quantized model" "fine-tune a quantized model"
expect_exit 2 "evaluate with another label set" -- "$MIXTRAIN" evaluate --checkpoint "$TMP/q-fp8" --task finefoods

# A GPT: a checkpoint quantized, then sampled from (greedy, reproducible).
write_text "$TMP/text.txt"
write_tiny_model "$TMP/tiny.json" 2 32 32
expect_exit 0 "train a tiny GPT" -- "$MIXTRAIN" --threads 1 train --model "$TMP/tiny.json" --data "$TMP/text.txt" \
  --batch-size 8 --steps 10 --lr 3e-3 --checkpoint-dir "$TMP/ckpt" --save-every 10 --json
expect_exit 0 "quantize the GPT" -- "$MIXTRAIN" --threads 1 quantize --checkpoint "$TMP/ckpt" --scheme int8-dynamic \
  --output "$TMP/gpt-int8"
expect_exit 0 "sample the quantized GPT" -- "$MIXTRAIN" --threads 1 sample --checkpoint "$TMP/gpt-int8" \
  --prompt "line" --tokens 8 --temperature 0
[ "$(wc -c <"$TMP/out")" -ge 12 ] && pass || fail "sample output: $(cat "$TMP/out")"
cp "$TMP/out" "$TMP/sample1"
expect_exit 0 "evaluate the GPT" -- "$MIXTRAIN" --threads 1 evaluate --checkpoint "$TMP/ckpt" --data "$TMP/text.txt" \
  --json "$TMP/g32.json"
expect_exit 0 "evaluate the quantized GPT" -- "$MIXTRAIN" --threads 1 evaluate --checkpoint "$TMP/gpt-int8" \
  --data "$TMP/text.txt" --json "$TMP/g8.json"
python3 - "$TMP/g32.json" "$TMP/g8.json" <<'PY' && pass || fail "evaluate GPT JSON"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["scheme"] == "none" and b["scheme"] == "int8-dynamic" and b["dtype"] == "bf16", (a, b)
assert a["val_tokens"] == b["val_tokens"] > 0, (a, b)
assert abs(a["val_loss"] - b["val_loss"]) < 0.05 * a["val_loss"], (a, b)
PY
"$MIXTRAIN" --threads 1 sample --checkpoint "$TMP/gpt-int8" --prompt "line" --tokens 8 --temperature 0 >"$TMP/out2" 2>/dev/null
cmp -s "$TMP/sample1" "$TMP/out2" && pass || fail "greedy sampling of the quantized GPT is not reproducible"
finish
