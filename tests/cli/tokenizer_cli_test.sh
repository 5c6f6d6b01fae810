#!/usr/bin/env bash
# `mixtrain tokenizer train|encode|decode`: a vocabulary learned from a file and written as
# vocab.json + merges.txt that encode reads back; encode and decode invert each other, line for
# line, in both output forms; bad input gets one-line errors and leaves nothing behind.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"
SRC="${MIXTRAIN_SOURCE_DIR:?}"

write_text "$TMP/text.txt"
printf 'caf\xc3\xa9 na\xc3\xafve \xe4\xb8\xad\xe6\x96\x87\n\n  spaced   out  \n' >>"$TMP/text.txt"

expect_exit 0 "tokenizer train" -- "$MIXTRAIN" tokenizer train --data "$TMP/text.txt" --vocab-size 300 --output "$TMP/tok"
grep -q "^tokenizer: 300 tokens, 44 merges" "$TMP/out" && pass || fail "train summary: $(cat "$TMP/out")"
[ "$(head -1 "$TMP/tok/merges.txt")" = "#version: 0.2" ] && [ "$(wc -l <"$TMP/tok/merges.txt")" = 45 ] && pass ||
  fail "merges.txt: $(head -3 "$TMP/tok/merges.txt")"
python3 -c 'import json, sys; v = json.load(open(sys.argv[1])); assert sorted(v.values()) == list(range(300))' \
  "$TMP/tok/vocab.json" && pass || fail "vocab.json is not ids 0..299"

expect_exit 0 "tokenizer encode" -- "$MIXTRAIN" tokenizer encode --tokenizer "$TMP/tok" --file "$TMP/text.txt"
cp "$TMP/out" "$TMP/ids.txt"
[ "$(wc -l <"$TMP/ids.txt")" = "$(wc -l <"$TMP/text.txt")" ] && pass || fail "encode: one line of ids per line"
expect_exit 0 "tokenizer encode --json --stats" -- "$MIXTRAIN" tokenizer encode --tokenizer "$TMP/tok" --file "$TMP/text.txt" --json --stats
cp "$TMP/out" "$TMP/ids.jsonl"
grep -q "^encoded 403 lines, .* tokens in" "$TMP/err" && pass || fail "--stats: $(cat "$TMP/err")"
python3 - "$TMP/ids.txt" "$TMP/ids.jsonl" <<'PY' && pass || fail "--json is not the same ids"
import json, sys
a = [[int(x) for x in l.split()] for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert a == b and len(a) == 403 and a[401] == [] and len(a[0]) > 5, (a[:2], b[:2])
PY
for f in ids.txt ids.jsonl; do
  expect_exit 0 "tokenizer decode $f" -- "$MIXTRAIN" tokenizer decode --tokenizer "$TMP/tok" --file "$TMP/$f"
  cmp -s "$TMP/out" "$TMP/text.txt" && pass || fail "decode($f) is not the text"
done

# The fixture's vocabulary (Hugging Face's files) loads as well.
expect_exit 0 "encode with tokenizers' files" -- "$MIXTRAIN" tokenizer encode --tokenizer "$SRC/tests/fixtures/bpe" --file "$TMP/text.txt"

# Errors: one line, exit 2, nothing written.
expect_exit 2 "train: missing data" -- "$MIXTRAIN" tokenizer train --data "$TMP/none.txt" --vocab-size 300 --output "$TMP/tok2"
[ ! -e "$TMP/tok2" ] && pass || fail "train on missing data left $TMP/tok2"
expect_exit 2 "train: vocab below 256" -- "$MIXTRAIN" tokenizer train --data "$TMP/text.txt" --vocab-size 100 --output "$TMP/tok2"
printf 'ok\n\xc3(\n' >"$TMP/bad.txt"
expect_exit 2 "train: not UTF-8" -- "$MIXTRAIN" tokenizer train --data "$TMP/bad.txt" --vocab-size 300 --output "$TMP/tok2"
grep -q "not valid UTF-8 at byte 3" "$TMP/err" && pass || fail "UTF-8 error: $(cat "$TMP/err")"
[ ! -e "$TMP/tok2/vocab.json" ] && pass || fail "a failed train wrote vocab.json"
expect_exit 2 "encode: not UTF-8" -- "$MIXTRAIN" tokenizer encode --tokenizer "$TMP/tok" --file "$TMP/bad.txt"
grep -q "bad.txt':2: .*byte 0" "$TMP/err" && pass || fail "encode error names the line: $(cat "$TMP/err")"
expect_exit 2 "encode: no tokenizer" -- "$MIXTRAIN" tokenizer encode --tokenizer "$TMP/none" --file "$TMP/text.txt"
echo "1 2 x" >"$TMP/badids.txt"
expect_exit 2 "decode: not an id" -- "$MIXTRAIN" tokenizer decode --tokenizer "$TMP/tok" --file "$TMP/badids.txt"
echo "[1, 99999]" >"$TMP/badids.txt"
expect_exit 2 "decode: id out of range" -- "$MIXTRAIN" tokenizer decode --tokenizer "$TMP/tok" --file "$TMP/badids.txt"
mkdir -p "$TMP/badtok" && echo '{"a": 0}' >"$TMP/badtok/vocab.json" && echo "a b" >"$TMP/badtok/merges.txt"
expect_exit 2 "encode: merge not in vocabulary" -- "$MIXTRAIN" tokenizer encode --tokenizer "$TMP/badtok" --file "$TMP/text.txt"

# Training on the tokenizer's ids: the text is encoded once into a token file beside it, reused by
# the next run; a stale or foreign token file is refused, never trained on.
write_tiny_model "$TMP/tiny.json" 1 32 32
train() { "$MIXTRAIN" --threads 1 train --model "$TMP/tiny.json" --data "$TMP/text.txt" --tokenizer "${TOK:-$TMP/tok}" \
  --batch-size 2 --steps 2 "$@"; }
expect_exit 0 "train --tokenizer" -- train --log-jsonl "$TMP/log1.jsonl"
tokens=$(ls "$TMP"/text.txt.*.tokens 2>/dev/null)
[ -n "$tokens" ] && [ "$(head -c 8 "$tokens")" = MXTOKEN1 ] && pass || fail "no token file beside the data"
grep -q "val loss" "$TMP/out" && pass || fail "train --tokenizer output: $(tail -2 "$TMP/out")"
touch -d '2000-01-01' "$tokens"
expect_exit 0 "train --tokenizer again (reuses the token file)" -- train --log-jsonl "$TMP/log2.jsonl"
[ "$(stat -c %Y "$tokens")" = "$(date -d 2000-01-01 +%s)" ] && pass || fail "the token file was written again"
same_log "$TMP/log1.jsonl" "$TMP/log2.jsonl" && pass || fail "the reused token file trains differently"
cp "$TMP/text.txt" "$TMP/text.orig"
echo "one more line" >>"$TMP/text.txt"
expect_exit 2 "stale token file" -- train --token-file "$tokens"
grep -q "is stale" "$TMP/err" && pass || fail "stale: $(cat "$TMP/err")"
cp "$TMP/text.orig" "$TMP/text.txt"
expect_exit 0 "another tokenizer" -- "$MIXTRAIN" tokenizer train --data "$TMP/text.txt" --vocab-size 280 --output "$TMP/tok280"
TOK="$TMP/tok280" expect_exit 2 "foreign token file" -- train --token-file "$tokens"
grep -q "made by another tokenizer" "$TMP/err" && pass || fail "foreign: $(cat "$TMP/err")"
cp "$tokens" "$TMP/damaged.tokens"
printf '\xff\xff' | dd of="$TMP/damaged.tokens" bs=1 seek=200 conv=notrunc 2>/dev/null
expect_exit 2 "damaged token file" -- train --token-file "$TMP/damaged.tokens"
grep -q "checksum does not match" "$TMP/err" && pass || fail "damaged: $(cat "$TMP/err")"
head -c 1000 "$tokens" >"$TMP/short.tokens"
expect_exit 2 "truncated token file" -- train --token-file "$TMP/short.tokens"
echo '{"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32, "vocab_size": 290}' >"$TMP/small_vocab.json"
expect_exit 2 "model vocabulary below the tokenizer's" -- train --model "$TMP/small_vocab.json"
expect_exit 2 "finetune task with --tokenizer" -- "$MIXTRAIN" train --task finefoods --tokenizer "$TMP/tok" --steps 1

# A checkpoint of a run with a tokenizer carries its files (what transformers' AutoTokenizer reads);
# sample encodes the prompt with them and prints text, not ids.
expect_exit 0 "train --tokenizer with checkpoints" -- train --checkpoint-dir "$TMP/ck" --save-every 2
ck=$(ls -d "$TMP"/ck/step-* | tail -1)
cmp -s "$ck/vocab.json" "$TMP/tok/vocab.json" && cmp -s "$ck/merges.txt" "$TMP/tok/merges.txt" && pass ||
  fail "the checkpoint's tokenizer files: $(ls "$ck")"
# config.json names no end-of-text token for a vocabulary without one (GPT2Config's default 50256
# would be out of range), and "<|endoftext|>"'s id for one that has it (appended here).
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); assert c["bos_token_id"] is None and c["eos_token_id"] is None, c' \
  "$ck/config.json" && pass || fail "config.json's end-of-text ids: $(cat "$ck/config.json")"
mkdir -p "$TMP/tok-eot"
cp "$TMP/tok/merges.txt" "$TMP/tok-eot/"
python3 - "$TMP/tok/vocab.json" "$TMP/tok-eot/vocab.json" <<'PY' || fail "could not write the end-of-text vocabulary"
import json, sys
v = json.load(open(sys.argv[1]))
v["<|endoftext|>"] = len(v)
json.dump(v, open(sys.argv[2], "w"))
PY
expect_exit 0 "train with an end-of-text token" -- "$MIXTRAIN" --threads 1 train --data "$TMP/text.txt" \
  --tokenizer "$TMP/tok-eot" --batch-size 2 --seq-len 16 --steps 1 --checkpoint-dir "$TMP/ck-eot"
python3 - "$(ls -d "$TMP"/ck-eot/step-* | tail -1)/config.json" "$TMP/tok-eot/vocab.json" <<'PY' && pass ||
import json, sys
c, v = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert c["vocab_size"] == len(v) and c["bos_token_id"] == c["eos_token_id"] == v["<|endoftext|>"], c
PY
  fail "config.json's end-of-text ids with <|endoftext|>: $(cat "$TMP"/ck-eot/step-*/config.json)"
prompt=$'caf\xc3\xa9 na'
expect_exit 0 "sample with the checkpoint's tokenizer" -- "$MIXTRAIN" --threads 1 sample --checkpoint "$TMP/ck" \
  --prompt "$prompt" --tokens 12 --seed 3
cp "$TMP/out" "$TMP/sample1.txt"
python3 - "$TMP/sample1.txt" "$TMP/tok/vocab.json" <<'PY' && pass || fail "sample output: $(head -c 200 "$TMP/sample1.txt")"
import json, sys
out = open(sys.argv[1], "rb").read()
p = "café na".encode()
assert out.startswith(p) and out.endswith(b"\n"), out[:40]
rest = out[len(p):-1]
# GPT-2's byte -> character map, inverted: each vocabulary token as bytes.
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs = bs[:]
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + len(cs) - 188)
to_byte = {chr(c): b for b, c in zip(bs, cs)}
tokens = {bytes(to_byte[ch] for ch in t) for t in json.load(open(sys.argv[2]))}
# The text after the prompt is 12 of the vocabulary's tokens, one after another (not ids).
reach = [set() for _ in range(len(rest) + 1)]  # reach[i]: token counts that end at byte i
reach[0].add(0)
for i in range(len(rest)):
    for n in reach[i]:
        for j in range(i + 1, min(len(rest), i + 64) + 1):
            if rest[i:j] in tokens: reach[j].add(n + 1)
assert 12 in reach[len(rest)], rest
PY
expect_exit 0 "sample a checkpoint's weights file: the tokenizer beside it" -- "$MIXTRAIN" --threads 1 sample \
  --checkpoint "$ck/model.safetensors" --prompt "$prompt" --tokens 12 --seed 3
cmp -s "$TMP/out" "$TMP/sample1.txt" && pass || fail "the weights file samples otherwise than its checkpoint"
expect_exit 0 "sample --tokenizer" -- "$MIXTRAIN" --threads 1 sample --checkpoint "$TMP/ck" --tokenizer "$TMP/tok" \
  --prompt "$prompt" --tokens 12 --seed 3
cmp -s "$TMP/out" "$TMP/sample1.txt" && pass || fail "--tokenizer (the same files) samples otherwise"
expect_exit 2 "sample: a tokenizer larger than the model" -- "$MIXTRAIN" --threads 1 sample --checkpoint "$TMP/ck" \
  --tokenizer "$SRC/tests/fixtures/bpe" --tokens 2
grep -q "more than the model's vocab_size" "$TMP/err" && pass || fail "tokenizer too large: $(cat "$TMP/err")"

# A Hugging Face GPT-2 model directory (config.json, model.safetensors with no mixtrain metadata,
# vocab.json, merges.txt): sample reads it as the checkpoint it came from; train --init-from DIR
# --tokenizer DIR (no --model: the configuration is config.json's) fine-tunes it in any precision,
# starting from its weights (at lr 1e-30 the weights do not move: the result samples the same).
mkdir -p "$TMP/hf"
cp "$ck/config.json" "$ck/vocab.json" "$ck/merges.txt" "$TMP/hf/"
python3 - "$ck/model.safetensors" "$TMP/hf/model.safetensors" <<'PY' || fail "could not strip the metadata"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
head.pop("__metadata__", None)
h = json.dumps(head).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + raw[8 + n:])
PY
expect_exit 0 "sample a Hugging Face model directory" -- "$MIXTRAIN" --threads 1 sample --checkpoint "$TMP/hf" \
  --prompt "$prompt" --tokens 12 --seed 3
cmp -s "$TMP/out" "$TMP/sample1.txt" && pass || fail "the model directory samples otherwise than its checkpoint"
for prec in bf16-mixed 16-mixed; do
  expect_exit 0 "train --init-from a model directory --tokenizer it ($prec)" -- "$MIXTRAIN" --threads 1 train \
    --init-from "$TMP/hf" --tokenizer "$TMP/hf" --data "$TMP/text.txt" --batch-size 2 --seq-len 16 --steps 2 \
    --lr 1e-30 --precision "$prec" --checkpoint-dir "$TMP/ft-$prec" --json
  python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); assert j["skipped_steps"] == 0, j' "$TMP/out" &&
    pass || fail "train --init-from output: $(tail -c 300 "$TMP/out")"
done
expect_exit 0 "sample the fine-tuned model" -- "$MIXTRAIN" --threads 1 sample --checkpoint "$TMP/ft-bf16-mixed" \
  --prompt "$prompt" --tokens 12 --seed 3
cmp -s "$TMP/out" "$TMP/sample1.txt" && pass || fail "fine-tuning at lr 1e-30 did not start from the model's weights"
cmp -s "$(ls -d "$TMP"/ft-bf16-mixed/step-* | tail -1)/vocab.json" "$TMP/hf/vocab.json" && pass ||
  fail "the fine-tuned checkpoint lacks the tokenizer"
# A quantized copy keeps the tokenizer files, and samples as text.
expect_exit 0 "quantize a tokenizer run's checkpoint" -- "$MIXTRAIN" --threads 1 quantize --checkpoint "$TMP/ck" \
  --scheme int8-weight --output "$TMP/q8"
cmp -s "$TMP/q8/vocab.json" "$TMP/tok/vocab.json" && cmp -s "$TMP/q8/merges.txt" "$TMP/tok/merges.txt" && pass ||
  fail "the quantized model's tokenizer files: $(ls "$TMP/q8")"
expect_exit 0 "quantize a checkpoint with an end-of-text token" -- "$MIXTRAIN" --threads 1 quantize \
  --checkpoint "$TMP/ck-eot" --scheme int8-weight --output "$TMP/q8-eot"
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); assert c["eos_token_id"] == c["vocab_size"] - 1, c' \
  "$TMP/q8-eot/config.json" && pass || fail "the quantized config.json's end-of-text id: $(cat "$TMP/q8-eot/config.json")"
expect_exit 0 "sample the quantized model" -- "$MIXTRAIN" --threads 1 sample --checkpoint "$TMP/q8" \
  --prompt "$prompt" --tokens 4 --seed 3
python3 -c 'import sys; o = open(sys.argv[1], "rb").read(); assert o.startswith("café na".encode()) and b"<|" not in o' \
  "$TMP/out" && pass ||
  fail "sample of the quantized model: $(head -c 200 "$TMP/out")"
expect_exit 2 "train --init-from without a configuration" -- "$MIXTRAIN" --threads 1 train \
  --init-from "$TMP/hf/model.safetensors.none" --steps 1

finish
