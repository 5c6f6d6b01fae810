#!/usr/bin/env bash
# `mixtrain finetune` and `mixtrain classify` end to end on a tiny random BERT (the encoder
# fixture's bert_tiny with a generated vocabulary) and a small TSV task whose label is the
# sentiment word in the text: it learns beyond the majority baseline; its --json has the summary
# keys and one entry per epoch; a run stopped and resumed from its checkpoint logs exactly the
# steps of an uninterrupted one; the saved model classifies texts; bad input is one line, exit 2.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"
SRC="${MIXTRAIN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"

# The model: bert_tiny (vocab 99, 24 positions, 3 labels) and a vocab.txt of 99 tokens.
write_tiny_encoder_task "$SRC" "$TMP"  # $TMP/model, $TMP/train.tsv, $TMP/test.tsv
M="$TMP/model"
FT=("$MIXTRAIN" --threads 1 finetune --model "$M" --train "$TMP/train.tsv" --test "$TMP/test.tsv" --max-len 16
  --batch-size 8 --lr 1e-2 --epochs 4 --pooling mean)

# An uninterrupted run: summary JSON, epochs, accuracy above the majority baseline (50%).
expect_exit 0 "straight run" -- "${FT[@]}" --log-jsonl "$TMP/straight.jsonl" --json "$TMP/s.json" --save "$TMP/saved"
grep -q '^epoch 4/4 (step 48): .* test accuracy' "$TMP/out" && pass || fail "no per-epoch line: $(head -c 400 "$TMP/out")"
python3 - "$TMP/s.json" <<'PY' && pass || fail "summary JSON"
import json, sys
j = json.load(open(sys.argv[1]))
for k in ("test_accuracy", "majority_baseline", "train_seconds", "tokens_per_s", "peak_bytes", "peak_bytes_by_category",
          "epochs", "labels"):
    assert k in j, k
assert j["majority_baseline"] == 0.5, j["majority_baseline"]
assert [e["step"] for e in j["epochs"]] == [12, 24, 36, 48], j["epochs"]
assert j["labels"] == ["negative", "neutral", "positive"], j["labels"]
assert j["test_accuracy"] > 0.8, j["test_accuracy"]
assert j["tokens_per_s"] > 0 and j["peak_bytes"] > 0 and j["train_seconds"] > 0
PY

# Stopped after step 17 (inside epoch 2), resumed: the same step log, value for value.
CK="$TMP/ck"
expect_exit 0 "first part" -- "${FT[@]}" --log-jsonl "$TMP/resumed.jsonl" --checkpoint-dir "$CK" --stop-after 17
expect_exit 0 "resumed part" -- "${FT[@]}" --log-jsonl "$TMP/resumed.jsonl" --checkpoint-dir "$CK" --resume "$CK" \
  --json "$TMP/r.json"
if msg=$(same_log "$TMP/straight.jsonl" "$TMP/resumed.jsonl"); then pass; else fail "resumed run differs from the straight one: $msg"; fi
# ... and each epoch's train loss is the straight run's, the one the resume cut too (its sums
# travel in the checkpoint: the mean was of the steps after the resume only).
python3 - "$TMP/s.json" "$TMP/r.json" <<'PY' && pass || fail "the resumed run's epoch train losses"
import json, sys
straight = {e["epoch"]: e for e in json.load(open(sys.argv[1]))["epochs"]}
resumed = json.load(open(sys.argv[2]))["epochs"]
assert [e["epoch"] for e in resumed] == [2, 3, 4], resumed
for e in resumed:
    assert e["train_loss"] == straight[e["epoch"]]["train_loss"], (e, straight[e["epoch"]])
PY
[ "$(wc -l <"$TMP/straight.jsonl")" = 48 ] && pass || fail "straight step log has $(wc -l <"$TMP/straight.jsonl") lines, expected 48"
expect_exit 2 "resume with another weight decay" -- "${FT[@]}" --weight-decay 0.02 --checkpoint-dir "$CK" --resume "$CK"
expect_stderr_has "options differ" "resume with another weight decay"

# The saved model classifies: label and probabilities.
expect_exit 0 "classify --text" -- "$MIXTRAIN" --threads 1 classify --checkpoint "$TMP/saved" --text "the food was good"
grep -Eq '^(negative|neutral|positive)	negative=[0-9.]+	neutral=[0-9.]+	positive=[0-9.]+$' "$TMP/out" && pass ||
  fail "classify output: $(cat "$TMP/out")"
grep -q '^positive' "$TMP/out" && pass || fail "'good' not classified positive: $(cat "$TMP/out")"
printf 'the food was bad\n\nthe food was meh\n' >"$TMP/texts.txt"
expect_exit 0 "classify --file" -- "$MIXTRAIN" --threads 1 classify --checkpoint "$TMP/saved" --file "$TMP/texts.txt"
[ "$(wc -l <"$TMP/out")" = 2 ] && pass || fail "classify --file: $(cat "$TMP/out")"

# The precision advice of a fine-tune: a few 32-true steps with probes, every mode judged; as JSON
# with --json FILE; nothing trained or saved otherwise.
expect_exit 0 "finetune --advise" -- "${FT[@]}" --advise
grep -q "^bf16-mixed: " "$TMP/out" && grep -q "^16-true: " "$TMP/out" && pass || fail "advice lines missing: $(head -c 400 "$TMP/out")"
expect_exit 0 "finetune --advise --json" -- "${FT[@]}" --advise --steps 2 --json "$TMP/advice.json"
python3 - "$TMP/advice.json" <<'PY' && pass || fail "advice JSON: $(head -c 300 "$TMP/advice.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["steps"] == 2, j["steps"]
assert set(j["modes"]) == {"16-mixed", "bf16-mixed", "16-true", "bf16-true", "fp8-mixed"}, j["modes"].keys()
assert j["fp8_sites"] and j["fp8_sites"][0]["site"].startswith("bert.encoder.layer.0."), j["fp8_sites"][:1]
assert j["min_loss_scale_log2"] <= j["max_loss_scale_log2"] + 64
PY
expect_exit 2 "--advise with --predict-memory" -- "${FT[@]}" --advise --predict-memory

# The memory prediction (the first two steps on the meta device) is the measured peak, to the byte.
expect_exit 0 "predict memory" -- "${FT[@]}" --precision bf16-mixed --steps 2 --predict-memory
cp "$TMP/out" "$TMP/predicted.json"
expect_exit 0 "two steps measured" -- "${FT[@]}" --precision bf16-mixed --steps 2 --json "$TMP/measured.json"
python3 - "$TMP/predicted.json" "$TMP/measured.json" <<'PY' && pass || fail "predicted and measured peaks differ"
import json, sys
p, m = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert p["peak_bytes"] == m["peak_bytes"] > 0, (p["peak_bytes"], m["peak_bytes"])
assert p["peak_bytes_by_category"] == m["peak_bytes_by_category"], (p, m["peak_bytes_by_category"])
# what makes up the peak: the categories at that moment, and the tensors alive then, add up to it
assert sum(p["at_peak_by_category"].values()) == p["peak_bytes"], p["at_peak_by_category"]
assert sum(t["bytes"] for t in p["terms"]) == p["peak_bytes"], p["terms"][:3]
assert all(t["bytes"] > 0 and t["count"] > 0 and t["category"] and t["name"] for t in p["terms"])
assert any("working copy" in t["name"] and t["category"] == "parameters" for t in p["terms"]), p["terms"]
PY

# The predicted-memory check before anything is allocated, as train's: a fine-tune whose predicted
# peak exceeds the memory it may take is refused (--memory-limit: less than the system has), and
# --force tries anyway; the summary's MFU is measured (it was 0 before the shared set-up).
expect_exit 2 "fine-tune over --memory-limit" -- "${FT[@]}" --steps 2 --memory-limit 1000 --save "$TMP/not_saved"
expect_stderr_has "(predicted peak) but --memory-limit allows 1000 bytes; --force tries anyway" "fine-tune over --memory-limit"
[ ! -e "$TMP/not_saved" ] && pass || fail "a refused fine-tune wrote its --save directory"
expect_exit 2 "--memory-limit 0" -- "${FT[@]}" --steps 2 --memory-limit 0
expect_stderr_has "--memory-limit must be a positive number of bytes" "--memory-limit 0"
expect_exit 0 "fine-tune over --memory-limit with --force" -- "${FT[@]}" --steps 2 --memory-limit 1000 --force --json "$TMP/forced.json"
grep -q "MFU [0-9.]*%" "$TMP/out" && pass || fail "fine-tune summary line without MFU: $(tail -n 1 "$TMP/out")"
python3 - "$TMP/forced.json" <<'PY' && pass || fail "fine-tune JSON: MFU and the GEMM rate"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["gemm_flops_per_s"] > 0 and 0 < j["mfu"] < 1, (j["gemm_flops_per_s"], j["mfu"])
PY

# The fine-tune through the other commands that train, as they take a GPT run (--task): bench
# train (tokens/s without padding, MFU, the step breakdown), memory (predicted = measured, to the
# byte), numerics --advise (as finetune --advise) and numerics probes.
TASK=(--task classify --model "$M" --train "$TMP/train.tsv" --test "$TMP/test.tsv" --max-len 16 --batch-size 8 --pooling mean)
expect_exit 0 "bench train --task classify" -- "$MIXTRAIN" --threads 1 bench train "${TASK[@]}" --steps 4 \
  --profile-warmup 1 --json "$TMP/bench.json"
grep -q "^32-true, 1 thread: .* tokens/s, .* MFU" "$TMP/out" && pass || fail "bench train --task: $(head -c 300 "$TMP/out")"
python3 - "$TMP/bench.json" <<'PY' && pass || fail "bench train --task classify JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["profiled_steps"] == 3 and j["tokens_per_s"] > 0 and 0 < j["mfu"] < 1, j
assert j["breakdown"]["gemm"] > 0 and j["breakdown"]["step"] >= j["breakdown"]["gemm"], j["breakdown"]
PY
expect_exit 0 "memory --task classify" -- "$MIXTRAIN" --threads 1 memory "${TASK[@]}" --precision bf16-mixed \
  --json "$TMP/memory.json"
grep -q "fine-tuned on $TMP/train.tsv: .* bf16-mixed, batch 8, max_len 16" "$TMP/out" && pass || fail "memory --task table: $(head -c 300 "$TMP/out")"
python3 - "$TMP/memory.json" <<'PY' && pass || fail "memory --task classify: predicted and measured peaks differ"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["predicted"]["peak_bytes"] == j["measured"]["peak_bytes"] > 0, (j["predicted"]["peak_bytes"], j["measured"])
assert j["predicted"]["by_category"] == j["measured"]["by_category"]
assert j["config"]["max_len"] == 16 and j["config"]["precision"] == "bf16-mixed" and j["parameters"] > 0, j["config"]
PY
expect_exit 0 "numerics --advise --task classify" -- "$MIXTRAIN" --threads 1 numerics --advise "${TASK[@]}" --json
python3 - "$TMP/out" <<'PY' && pass || fail "numerics --advise --task classify JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["steps"] == 3 and set(j["modes"]) == {"16-mixed", "bf16-mixed", "16-true", "bf16-true", "fp8-mixed"}, j["modes"]
PY
expect_exit 0 "numerics --task classify probes" -- "$MIXTRAIN" --threads 1 numerics "${TASK[@]}" --numerics "$TMP/probes.jsonl"
[ -s "$TMP/probes.jsonl" ] && pass || fail "numerics --task classify wrote no probes"
expect_exit 2 "memory --task lm with a fine-tune flag" -- "$MIXTRAIN" memory --task lm --max-len 16
expect_stderr_has "--max-len applies to --task classify, not lm" "memory --task lm with a fine-tune flag"

# A fine-tune whose weights end non-finite (16-true at lr 10) is diverged (exit 3) and claims no
# test accuracy (it printed 50.00% beside a NaN test loss).
expect_exit 3 "fine-tune ending non-finite" -- "$MIXTRAIN" --threads 1 finetune --model "$M" --train "$TMP/train.tsv" \
  --test "$TMP/test.tsv" --max-len 16 --batch-size 8 --epochs 1 --precision 16-true --lr 10 --json "$TMP/nan.json" \
  --save "$TMP/nan_save"
[ ! -e "$TMP/nan_save" ] && pass || fail "a diverged fine-tune saved its model"
expect_stderr_has "the final evaluation's loss is NaN" "fine-tune ending non-finite"
grep -q "test accuracy none (non-finite loss)" "$TMP/out" && pass || fail "epoch line of a NaN fine-tune: $(grep epoch "$TMP/out")"
python3 - "$TMP/nan.json" <<'PY' && pass || fail "the JSON of a fine-tune ending non-finite"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["diverged"] is True and j["val_accuracy"] is None and j["epochs"][-1]["test_accuracy"] is None, j["epochs"]
PY

# No output over an input: --json over the training file or a file of the model directory, --save
# into the model directory; an earlier save is replaced only with --overwrite.
cp "$M/config.json" "$TMP/config.orig"
cp "$TMP/train.tsv" "$TMP/train.orig"
expect_exit 2 "--json over the model's config.json" -- "${FT[@]}" --steps 1 --json "$M/config.json"
expect_stderr_has "is the same file as the --model input" "--json over the model's config.json"
expect_exit 2 "--json over --train" -- "${FT[@]}" --steps 1 --json "$TMP/train.tsv"
expect_stderr_has "is the same file as the --train input" "--json over --train"
expect_exit 2 "--save into --model" -- "${FT[@]}" --steps 1 --save "$M"
expect_stderr_has "is the --model $M: saving would replace the pretrained model" "--save into --model"
cmp -s "$M/config.json" "$TMP/config.orig" && cmp -s "$TMP/train.tsv" "$TMP/train.orig" && pass || fail "an input was changed"
expect_exit 2 "--save over an earlier save" -- "${FT[@]}" --steps 1 --save "$TMP/saved"
expect_stderr_has "exists and is not empty (an earlier save?)" "--save over an earlier save"
expect_exit 0 "--save over an earlier save with --overwrite" -- "${FT[@]}" --steps 1 --save "$TMP/saved" --overwrite

# A directory or a name without an extension as --train is named as such ("unknown format ''").
expect_exit 2 "--train ." -- "$MIXTRAIN" finetune --model "$M" --train . --test "$TMP/test.tsv"
expect_stderr_has "data file '.' is a directory, not a .tsv, .csv or .jsonl file" "--train ."
cp "$TMP/train.tsv" "$TMP/train_noext"
expect_exit 2 "--train without an extension" -- "$MIXTRAIN" finetune --model "$M" --train "$TMP/train_noext" --test "$TMP/test.tsv"
expect_stderr_has "has no extension to tell its format" "--train without an extension"

# compare --task classify: the reference table, one row per mode, and its JSON.
expect_exit 0 "compare --task classify" -- "$MIXTRAIN" --threads 1 compare --task classify --model "$M" \
  --train "$TMP/train.tsv" --test "$TMP/test.tsv" --max-len 16 --batch-size 8 --lr 1e-2 --pooling mean --epochs 4 \
  --precisions 32-true,bf16-mixed,16-true --json "$TMP/compare.json"
grep -q '^precision .*time (s) .*peak MiB .*RSS MiB .*test acc. .*diverged' "$TMP/out" && pass || fail "compare table: $(cat "$TMP/out")"
[ "$(grep -cE '^(32-true|bf16-mixed|16-true:nearest) ' "$TMP/out")" = 3 ] && pass || fail "compare rows: $(cat "$TMP/out")"
python3 - "$TMP/compare.json" <<'PY' && pass || fail "compare JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["majority_baseline"] == 0.5
assert [r["precision"] for r in j["runs"]] == ["32-true", "bf16-mixed", "16-true"]
for r in j["runs"]:
    for k in ("train_seconds", "peak_bytes", "test_accuracy", "diverged"):
        assert k in r, k
    # the process beside the tensors: its own resident peak (restarted for each mode) and its size
    # at the start (Linux's resident counters are cached per thread, up to 64 pages each: 1 MiB of
    # slack where the run adds little); what made up the tensors' peak adds up to it (one thread)
    assert r["peak_rss_from_start"] is True and r["peak_rss_bytes"] + 2**20 > r["fixed_rss_bytes"] > 0, r
    assert sum(r["at_peak_by_category"].values()) == r["peak_bytes"], r["at_peak_by_category"]
assert j["runs"][0]["test_accuracy"] > 0.8, j["runs"][0]
PY
# The fused LM head is for language models: a classifier refuses it by name.
expect_exit 2 "finetune --fused-lm-head" -- "${FT[@]}" --steps 1 --fused-lm-head
expect_stderr_has "--fused-lm-head: this model has no language-model head" "finetune --fused-lm-head"
expect_exit 2 "compare --task lm with --epochs" -- "$MIXTRAIN" compare --epochs 2
expect_stderr_has "--epochs" "compare --task lm with --epochs"

# Bad input: one line naming the flag, file or line; exit 2; nothing trained.
printf 'text\tlabel\nthe food was good\n' >"$TMP/bad.tsv"
expect_exit 2 "bad row" -- "${FT[@]/$TMP\/train.tsv/$TMP/bad.tsv}"
expect_stderr_has "bad.tsv:2" "bad row"
expect_exit 2 "missing test file" -- "${FT[@]/$TMP\/test.tsv/$TMP/none.tsv}"
expect_stderr_has "none.tsv" "missing test file"
expect_exit 2 "train without test" -- "$MIXTRAIN" finetune --model "$M" --train "$TMP/train.tsv"
expect_stderr_has "--test" "train without test"
expect_exit 2 "bad pooling" -- "${FT[@]}" --pooling max
expect_stderr_has "--pooling" "bad pooling"
expect_exit 2 "bad max-len" -- "${FT[@]}" --max-len 1
expect_stderr_has "--max-len" "bad max-len"
expect_exit 2 "bad task" -- "$MIXTRAIN" finetune --task imdb
expect_stderr_has "--task" "bad task"
expect_exit 2 "no model" -- "${FT[@]/$M/$TMP/nomodel}"
expect_stderr_has "nomodel" "no model"
expect_exit 2 "json into a directory" -- "${FT[@]}" --json "$TMP"
expect_stderr_has "--json" "json into a directory"
expect_exit 2 "unknown label column" -- "${FT[@]}" --label-column score
expect_stderr_has "score" "unknown label column"
expect_exit 2 "classify without text" -- "$MIXTRAIN" classify --checkpoint "$TMP/saved"
expect_exit 2 "classify a bare encoder" -- "$MIXTRAIN" classify --checkpoint "$M/none" --text x


# classify: --max-len past the model's positions is refused (it was clamped), as finetune does;
# invalid UTF-8 is named by file and line; labels that would forge output fields or lines, or name
# one class twice, are refused at load; --file streams (the first batch is printed before the
# input ends).
expect_exit 2 "classify --max-len past the positions" -- "$MIXTRAIN" classify --checkpoint "$TMP/saved" --max-len 1000000 --text x
expect_stderr_has "--max-len 1000000 exceeds" "classify --max-len past the positions"
printf 'good\n\nbad \xff\xfe food\n' >"$TMP/bad-utf8.txt"
expect_exit 2 "classify invalid UTF-8" -- "$MIXTRAIN" classify --checkpoint "$TMP/saved" --file "$TMP/bad-utf8.txt"
expect_stderr_has "bad-utf8.txt:3: " "classify invalid UTF-8"
for label in 'pos\tfake=1.0' 'pos\nforged' 'negative'; do
  rm -rf "$TMP/spoof" && cp -r "$TMP/saved" "$TMP/spoof"
  python3 - "$TMP/spoof/config.json" "$label" <<'PY'
import json, sys
p, label = sys.argv[1], sys.argv[2].encode().decode("unicode_escape")
c = json.load(open(p))
first = sorted(c["id2label"], key=int)[-1]
c["id2label"][first] = label
json.dump(c, open(p, "w"))
PY
  expect_exit 2 "classify with label '$label'" -- "$MIXTRAIN" classify --checkpoint "$TMP/spoof" --text x
  expect_stderr_has "id2label" "classify with label '$label'"
done
for i in $(seq 1 20); do echo "the food was good $i"; done >"$TMP/stream.txt"
mkfifo "$TMP/stream.fifo"
"$MIXTRAIN" --threads 1 classify --checkpoint "$TMP/saved" --file "$TMP/stream.fifo" >"$TMP/stream.out" 2>"$TMP/stream.err" &
reader=$!
exec 7>"$TMP/stream.fifo"
head -n 16 "$TMP/stream.txt" >&7
for _ in $(seq 1 600); do [ "$(wc -l <"$TMP/stream.out")" -ge 16 ] && break; sleep 0.05; done
[ "$(wc -l <"$TMP/stream.out")" = 16 ] && pass || fail "classify --file: the first batch was not printed before the input ended"
tail -n 4 "$TMP/stream.txt" >&7
exec 7>&-
wait "$reader" && [ "$(wc -l <"$TMP/stream.out")" = 20 ] && pass || fail "classify --file stream: $(cat "$TMP/stream.err")"


# A training file with a header alone is named as the problem (the test file was blamed).
head -n 1 "$TMP/train.tsv" >"$TMP/header-only.tsv"
expect_exit 2 "header-only training file" -- "$MIXTRAIN" --threads 1 finetune --model "$M" --train "$TMP/header-only.tsv" \
  --test "$TMP/test.tsv" --max-len 16
expect_stderr_has "header-only.tsv holds no examples" "header-only training file"


# --json of the advice and of compare --task over the training file: refused, the file intact.
cp "$TMP/train.tsv" "$TMP/train.orig"
expect_exit 2 "finetune --advise --json over --train" -- "${FT[@]}" --advise --json "$TMP/train.tsv"
expect_stderr_has "same file as the --train input" "finetune --advise --json over --train"
expect_exit 2 "numerics --advise --json over --train" -- "$MIXTRAIN" --threads 1 numerics --advise --task classify \
  --model "$M" --train "$TMP/train.tsv" --test "$TMP/test.tsv" --max-len 16 --json "$TMP/train.tsv"
expect_stderr_has "same file as the --train input" "numerics --advise --json over --train"
expect_exit 2 "compare --task --json over --test" -- "$MIXTRAIN" --threads 1 compare --task classify --model "$M" \
  --train "$TMP/train.tsv" --test "$TMP/test.tsv" --max-len 16 --precisions 32-true --json "$TMP/test.tsv"
expect_stderr_has "same file as the --test input" "compare --task --json over --test"
cmp -s "$TMP/train.tsv" "$TMP/train.orig" && pass || fail "the training file was changed"

finish
