#!/usr/bin/env bash
# --optim-state bf16|int8 end to end (kernels/state_kernels.h):
# - train in bf16-mixed with int8 state, stopped at step 3 and resumed: the final checkpoint's
#   weights and training state (codes, block absmax, fp32 fallback) byte for byte the uninterrupted
#   run's; the state file says its precision; resuming with another --optim-state is refused
# - mixtrain memory: optimizer state predicted to the byte (predicted = measured) in every state
#   precision, bf16 exactly half of fp32's and int8 2 bytes an element plus its absmax and fallback
#   (between 0.25x and 0.27x of fp32's on a model of embedding 128)
# - finetune takes it (the tiny encoder task learns with int8 state)
# - bad input: a *-true mode with bf16 / int8 state, an unknown precision: one line, exit 2
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"
SRC="${MIXTRAIN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
write_text "$TMP/text.txt"
write_tiny_model "$TMP/tiny.json" 2 32 32
B=("$MIXTRAIN" --threads 1 train --data "$TMP/text.txt" --model "$TMP/tiny.json" --batch-size 2)
T=("${B[@]}" --precision bf16-mixed --optim-state int8)

# 1. Exact resume.
expect_exit 0 "int8 straight" -- "${T[@]}" --steps 6 --checkpoint-dir "$TMP/straight"
expect_exit 0 "int8 stopped" -- "${T[@]}" --steps 6 --stop-after 3 --checkpoint-dir "$TMP/cut"
expect_exit 0 "int8 resumed" -- "${T[@]}" --steps 6 --resume "$TMP/cut" --checkpoint-dir "$TMP/resumed"
same_checkpoint "$TMP/straight/step-000006" "$TMP/resumed/step-000006" "the resumed int8 run against the straight run"
python3 - "$TMP/straight/step-000006/train_state.safetensors" <<'PY' && pass || fail "train_state lacks the int8 state"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
state = json.loads(h["__metadata__"]["mixtrain"])["optimizer"]["state"]
assert state == "int8", state
for t in ("optim.exp_avg", "optim.exp_avg_sq"):
    assert h[t]["dtype"] == "I8", h[t]
    for part in (".absmax", ".fallback"):
        assert h[t + part]["dtype"] == "F32", (t + part, h[t + part])
PY
expect_exit 2 "resume with another --optim-state" -- "${B[@]}" --precision bf16-mixed --steps 6 --resume "$TMP/cut" \
  --optim-state fp32
expect_stderr_has "optim_state" "resume with another --optim-state"

# 2. Memory: predicted = measured, and the ratios, on a wider model (embedding 128: most tensors
# above bitsandbytes' 4096-element threshold, as in real models).
write_tiny_model "$TMP/wide.json" 2 128 32
for st in fp32 bf16 int8; do
  expect_exit 0 "memory $st" -- "$MIXTRAIN" --threads 1 memory --model "$TMP/wide.json" --precision bf16-mixed \
    --batch-size 2 --seq-len 32 --steps 2 --optim-state "$st" --json "$TMP/mem-$st.json"
done
python3 - "$TMP"/mem-{fp32,bf16,int8}.json <<'PY' && pass || fail "optimizer state bytes"
import json, sys
f, b, q = (json.load(open(p)) for p in sys.argv[1:])
for j in (f, b, q):
    assert j["predicted"]["by_category"] == j["measured"]["by_category"], j["config"]
opt = [j["measured"]["by_category"]["optimizer_state"] for j in (f, b, q)]
assert q["config"]["optim_state"] == "int8", q["config"]
assert opt[1] * 2 == opt[0], opt
assert 0.25 * opt[0] <= opt[2] <= 0.27 * opt[0], (opt, opt[2] / opt[0])
print("optimizer state bytes fp32 / bf16 / int8:", opt, "int8 ratio %.4f" % (opt[2] / opt[0]))
PY

# 3. finetune with int8 state learns the tiny task.
write_tiny_encoder_task "$SRC" "$TMP/enc"
expect_exit 0 "finetune int8 state" -- "$MIXTRAIN" --threads 1 finetune --model "$TMP/enc/model" \
  --train "$TMP/enc/train.tsv" --test "$TMP/enc/test.tsv" --max-len 16 --batch-size 8 --lr 1e-2 --epochs 4 \
  --pooling mean --precision bf16-mixed --optim-state int8 --json "$TMP/ft.json"
python3 -c "import json,sys; a=json.load(open(sys.argv[1]))['test_accuracy']; assert a > 0.8, a" "$TMP/ft.json" &&
  pass || fail "finetune with int8 state did not learn: $(head -c 300 "$TMP/ft.json")"

# 4. Bad input.
expect_exit 2 "bf16-true with int8 state" -- "${B[@]}" --steps 2 --precision bf16-true --optim-state int8
expect_stderr_has "needs fp32 weights" "bf16-true with int8 state"
expect_exit 2 "unknown state precision" -- "${B[@]}" --steps 2 --optim-state int4
finish
