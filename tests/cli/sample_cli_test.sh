#!/usr/bin/env bash
# `mixtrain sample`: deterministic for a seed, the same text from a checkpoint directory, one
# checkpoint or its model.safetensors, and from a Hugging Face style copy (no prefix, a
# config.json); bad input is one line and exit 2.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"

write_text "$TMP/text.txt"
write_tiny_model "$TMP/tiny.json" 2 32 32
C="$TMP/ck"
expect_exit 0 "train" -- "$MIXTRAIN" --threads 1 train --model "$TMP/tiny.json" --data "$TMP/text.txt" --batch-size 8 \
  --steps 20 --lr 3e-3 --checkpoint-dir "$C" --save-every 10 --json
SAMPLE=("$MIXTRAIN" --threads 1 sample --prompt "line 1" --tokens 40)

expect_exit 0 "sample" -- "${SAMPLE[@]}" --checkpoint "$C" --seed 5
cp "$TMP/out" "$TMP/s1"
if [ "$(head -c 6 "$TMP/s1")" = "line 1" ] && [ "$(wc -c <"$TMP/s1")" = 47 ]; then pass; else fail "sample output: $(cat "$TMP/s1")"; fi
expect_exit 0 "same seed" -- "${SAMPLE[@]}" --checkpoint "$C" --seed 5
if cmp -s "$TMP/out" "$TMP/s1"; then pass; else fail "same seed, different text"; fi
expect_exit 0 "other seed" -- "${SAMPLE[@]}" --checkpoint "$C" --seed 6
if ! cmp -s "$TMP/out" "$TMP/s1"; then pass; else fail "another seed gave the same text"; fi
expect_exit 0 "one checkpoint" -- "${SAMPLE[@]}" --checkpoint "$C/step-000020" --seed 5
if cmp -s "$TMP/out" "$TMP/s1"; then pass; else fail "step-000020 differs from the directory's newest"; fi
expect_exit 0 "model file" -- "${SAMPLE[@]}" --checkpoint "$C/step-000020/model.safetensors" --seed 5
if cmp -s "$TMP/out" "$TMP/s1"; then pass; else fail "model.safetensors differs from the checkpoint"; fi
expect_exit 0 "earlier checkpoint" -- "${SAMPLE[@]}" --checkpoint "$C/step-000010" --seed 5
if ! cmp -s "$TMP/out" "$TMP/s1"; then pass; else fail "step 10 and step 20 gave the same text"; fi
expect_exit 0 "greedy" -- "${SAMPLE[@]}" --checkpoint "$C" --temperature 0 --seed 1
cp "$TMP/out" "$TMP/greedy"
expect_exit 0 "greedy, other seed" -- "${SAMPLE[@]}" --checkpoint "$C" --temperature 0 --seed 2
if cmp -s "$TMP/out" "$TMP/greedy"; then pass; else fail "greedy depends on the seed"; fi

# A Hugging Face style copy: GPT2Model names (no "transformer."), a tied lm_head, no metadata,
# and a config.json beside it.
mkdir -p "$TMP/hf"
python3 - "$C/step-000020/model.safetensors" "$TMP/hf/model.safetensors" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
buf = data[8 + n:]
out, pieces, off = {}, [], 0
for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0] if kv[0] != "__metadata__" else -1):
    if name == "__metadata__":
        continue
    b, en = e["data_offsets"]
    out[name[len("transformer."):]] = {"dtype": e["dtype"], "shape": e["shape"], "data_offsets": [off, off + en - b]}
    pieces.append(buf[b:en]); off += en - b
    if name == "transformer.wte.weight":
        out["lm_head.weight"] = {"dtype": e["dtype"], "shape": e["shape"], "data_offsets": [off, off + en - b]}
        pieces.append(buf[b:en]); off += en - b
text = json.dumps(out).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + b"".join(pieces))
PY
echo '{"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 32, "vocab_size": 256, "layer_norm_epsilon": 1e-05}' >"$TMP/hf/config.json"
expect_exit 0 "hugging face copy" -- "${SAMPLE[@]}" --checkpoint "$TMP/hf/model.safetensors" --seed 5
if cmp -s "$TMP/out" "$TMP/s1"; then pass; else fail "the Hugging Face copy samples differently"; fi
# Training from the Hugging Face copy (--init-from): its first loss is the trained model's, far
# below a fresh model's; a file of another model size is refused.
TRAIN=("$MIXTRAIN" --threads 1 train --model "$TMP/tiny.json" --data "$TMP/text.txt" --batch-size 8 --steps 2 --json)
expect_exit 0 "fresh" -- "${TRAIN[@]}" --log-jsonl "$TMP/fresh.jsonl"
expect_exit 0 "init from hf" -- "${TRAIN[@]}" --log-jsonl "$TMP/init.jsonl" --init-from "$TMP/hf/model.safetensors"
if python3 -c "
import json, sys
f = json.loads(open('$TMP/fresh.jsonl').readline())['loss']
i = json.loads(open('$TMP/init.jsonl').readline())['loss']
sys.exit(0 if i < f - 1.0 else 1)"; then pass; else fail "--init-from did not start from the trained weights"; fi
echo '{"n_layer": 2, "n_head": 2, "n_embd": 16, "block_size": 32}' >"$TMP/narrow.json"
expect_exit 2 "init from a file of another size" -- "$MIXTRAIN" --threads 1 train --model "$TMP/narrow.json" \
  --data "$TMP/text.txt" --steps 1 --init-from "$TMP/hf/model.safetensors"
expect_stderr_has "expected" "init from another size"
expect_exit 2 "init-from with resume" -- "${TRAIN[@]}" --init-from "$TMP/hf/model.safetensors" --resume "$C"
# The same logits, bit for bit, from the checkpoint and from the Hugging Face copy.
expect_exit 0 "logits from the checkpoint" -- "$MIXTRAIN" --threads 1 sample --prompt "line 1" --tokens 0 --checkpoint "$C" --logits-json "$TMP/l1.json"
expect_exit 0 "logits from the copy" -- "$MIXTRAIN" --threads 1 sample --prompt "line 1" --tokens 0 --checkpoint "$TMP/hf/model.safetensors" --logits-json "$TMP/l2.json"
if python3 -c "
import json, sys
a, b = json.load(open('$TMP/l1.json')), json.load(open('$TMP/l2.json'))
ok = a == b and a['tokens'] == [ord(c) for c in 'line 1'] and len(a['logits']) == 6 and len(a['logits'][0]) == 256
sys.exit(0 if ok else 1)"; then pass; else fail "--logits-json: checkpoint and copy differ, or wrong shape"; fi
rm "$TMP/hf/config.json"
expect_exit 2 "bare file without a config" -- "${SAMPLE[@]}" --checkpoint "$TMP/hf/model.safetensors"
expect_stderr_has "carries no configuration: give --n-head (or a config.json beside it)" "bare file without a config"
expect_exit 0 "bare file with --n-head" -- "${SAMPLE[@]}" --checkpoint "$TMP/hf/model.safetensors" --n-head 2 --seed 5
if cmp -s "$TMP/out" "$TMP/s1"; then pass; else fail "shapes + --n-head samples differently"; fi
echo '{"n_embd": "32", "n_layer": 2, "n_head": 2, "n_positions": 32, "vocab_size": 256}' >"$TMP/hf/config.json"
expect_exit 2 "config.json with a string size" -- "${SAMPLE[@]}" --checkpoint "$TMP/hf/model.safetensors"
expect_stderr_has "'n_embd' must be an integer" "config.json types"
echo '{"n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 32, "vocab_size": 256' >"$TMP/hf/config.json"
expect_exit 2 "config.json malformed" -- "${SAMPLE[@]}" --checkpoint "$TMP/hf/model.safetensors"
expect_stderr_has "config.json is not valid JSON" "config.json malformed"
echo '{"n_embd": 64, "n_layer": 2, "n_head": 2, "n_positions": 32, "vocab_size": 256}' >"$TMP/hf/config.json"
expect_exit 2 "config.json of another size" -- "${SAMPLE[@]}" --checkpoint "$TMP/hf/model.safetensors"
expect_stderr_has "expected" "config.json of another size"

# Hostile safetensors files, given to sample and to train --init-from: one line naming the file,
# exit 2, and the step log of the refused run is left as it was.
python3 - "$C/step-000010/model.safetensors" "$TMP/hostile" <<'PY'
import json, os, struct, sys
good = open(sys.argv[1], "rb").read()
out = sys.argv[2]
os.makedirs(out, exist_ok=True)
n = struct.unpack("<Q", good[:8])[0]
header = json.loads(good[8:8 + n])
def write(name, data):
    open(os.path.join(out, name + ".safetensors"), "wb").write(data)
def with_header(h, buf=good[8 + n:]):
    text = json.dumps(h).encode()
    return struct.pack("<Q", len(text)) + text + buf
write("truncated", good[: len(good) // 2])
write("header_past_end", struct.pack("<Q", len(good)) + good[8:])
write("huge_header", struct.pack("<Q", 1 << 62) + good[8:])
h = json.loads(json.dumps(header)); h["transformer.wpe.weight"]["data_offsets"] = h["transformer.wte.weight"]["data_offsets"]
write("overlapping", with_header(h))
h = json.loads(json.dumps(header)); h["transformer.ln_f.bias"]["data_offsets"][1] += 1 << 40
write("out_of_range", with_header(h))
h = json.loads(json.dumps(header)); h["transformer.ln_f.bias"]["shape"] = [4611686018427387904, 4]
write("huge_shape", with_header(h))
h = json.loads(json.dumps(header)); h["transformer.ln_f.bias"]["dtype"] = "I32"
write("wrong_dtype", with_header(h))
h = json.loads(json.dumps(header)); h["transformer.ln_f.bias"]["shape"] = [8, 4]
write("wrong_shape", with_header(h))
text = json.dumps(header).encode().replace(b'"transformer.ln_f.bias"', b'"transformer.ln_f.bias\xff"')
write("non_utf8_name", struct.pack("<Q", len(text)) + text + good[8 + n:])
text = json.dumps(header).encode()
ln = json.dumps({"transformer.ln_f.bias": header["transformer.ln_f.bias"]}).encode()[1:-1]
text = text[:-1] + b"," + ln + b"}"
write("duplicate_name", struct.pack("<Q", len(text)) + text + good[8 + n:])
h = json.loads(json.dumps(header)); h["transformer.ln_f.bias"]["shape"] = "32"
write("wrong_json_type", with_header(h))
PY
printf '{"step": 1}\n' >"$TMP/keep.jsonl"
for f in "$TMP"/hostile/*.safetensors; do
  name=$(basename "$f" .safetensors)
  expect_exit 2 "sample, hostile $name" -- "${SAMPLE[@]}" --checkpoint "$f"
  expect_stderr_has "$f" "sample, hostile $name names the file"
  expect_exit 2 "init-from, hostile $name" -- "$MIXTRAIN" --threads 1 train --model "$TMP/tiny.json" \
    --data "$TMP/text.txt" --steps 1 --init-from "$f" --log-jsonl "$TMP/keep.jsonl" --overwrite
  expect_stderr_has "$f" "init-from, hostile $name names the file"
done
if [ "$(cat "$TMP/keep.jsonl")" = '{"step": 1}' ]; then pass; else fail "a refused run changed its step log"; fi

# Bad input.
expect_exit 2 "missing checkpoint" -- "${SAMPLE[@]}" --checkpoint "$TMP/none"
expect_stderr_has "$TMP/none" "missing checkpoint"
expect_exit 2 "empty prompt" -- "${SAMPLE[@]}" --checkpoint "$C" --prompt ""
expect_exit 2 "negative temperature" -- "${SAMPLE[@]}" --checkpoint "$C" --temperature -1
expect_stderr_has "error: --temperature must be >= 0" "negative temperature names the flag"
expect_exit 2 "negative top-k" -- "${SAMPLE[@]}" --checkpoint "$C" --top-k -1
expect_stderr_has "error: --top-k must be >= 0" "negative top-k names the flag"
expect_exit 2 "no --checkpoint" -- "$MIXTRAIN" sample --prompt x
mkdir -p "$TMP/empty"
expect_exit 2 "directory without checkpoints" -- "${SAMPLE[@]}" --checkpoint "$TMP/empty"
printf 'not safetensors' >"$TMP/junk.safetensors"
expect_exit 2 "junk file" -- "${SAMPLE[@]}" --checkpoint "$TMP/junk.safetensors"
expect_stderr_has "junk.safetensors" "junk file"
# The newest checkpoint's weights corrupt: the previous one is used, with a warning.
printf 'x' | dd of="$C/step-000020/model.safetensors" bs=1 seek=200 conv=notrunc 2>/dev/null
"${SAMPLE[@]}" --checkpoint "$C" --seed 5 >"$TMP/out" 2>"$TMP/err"
if [ $? = 0 ] && grep -q "skipping invalid checkpoint: checkpoint $C/step-000020" "$TMP/err"; then pass; else fail "corrupt newest: $(cat "$TMP/err")"; fi
expect_exit 2 "corrupt checkpoint named" -- "${SAMPLE[@]}" --checkpoint "$C/step-000020"
expect_stderr_has "CRC-32" "corrupt checkpoint named"

# Weights that are inf or NaN (a diverged run's): refused with a word, not sampled into 0xFF bytes.
python3 - "$C/step-000020/model.safetensors" "$TMP/nan.safetensors" <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
head = json.loads(b[8:8 + n])
name, t = next((k, v) for k, v in head.items() if k != "__metadata__" and v["dtype"] == "F32")
start = 8 + n + t["data_offsets"][0]
b[start:start + 8] = struct.pack("<ff", float("nan"), float("inf"))
open(sys.argv[2], "wb").write(b)
PY
expect_exit 2 "sample from NaN weights" -- "${SAMPLE[@]}" --checkpoint "$TMP/nan.safetensors"
expect_stderr_has "2 of " "sample from NaN weights"
expect_stderr_has "weights are inf or NaN (the run that saved them diverged)" "sample from NaN weights"


# A hostile mixtrain_config (sizes no file holds) is refused naming the file, not an allocation
# that ends in "out of memory"; a logits JSON over the checkpoint it reads is refused.
python3 - "$C/step-000020/model.safetensors" "$TMP/huge.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
cfg = json.loads(h["__metadata__"]["mixtrain_config"])
cfg["n_layer"] = 4096  # within the config's limits; 3 * 10^12 parameters
cfg["n_embd"] = 8192
h["__metadata__"]["mixtrain_config"] = json.dumps(cfg)
t = json.dumps(h).encode()
t += b" " * (-len(t) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(t)) + t + raw[8 + n:])
PY
expect_exit 2 "a hostile mixtrain_config" -- "${SAMPLE[@]}" --checkpoint "$TMP/huge.safetensors"
expect_stderr_has "huge.safetensors: the weights hold" "a hostile mixtrain_config"
cp "$C/step-000020/model.safetensors" "$TMP/model.orig"
expect_exit 2 "logits JSON over the checkpoint" -- "$MIXTRAIN" --threads 1 sample --prompt "line 1" --tokens 0 \
  --checkpoint "$C/step-000020/model.safetensors" --logits-json "$C/step-000020/model.safetensors"
cmp -s "$TMP/model.orig" "$C/step-000020/model.safetensors" && pass || fail "sample --logits-json replaced the checkpoint"

finish
