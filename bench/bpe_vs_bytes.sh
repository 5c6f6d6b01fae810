#!/usr/bin/env bash
# Byte-level against byte-level BPE at equal training compute (issue 29's bits-per-byte study):
# MODEL (a preset, default gpt-mini) with its block size as the sequence length, PRECISION (default
# bf16-mixed), batch 16, 2 threads, on the built-in corpus. The byte model
# trains STEPS steps; the BPE model (a V-token vocabulary learned from the corpus by `mixtrain
# tokenizer train`) trains as many steps as the same FLOPs buy (model FLOPs per token from each
# run's summary: the larger head makes a BPE token dearer). Both report the validation loss in bits
# per byte of the same validation text (val_bits_per_byte), the measure that compares them.
#   [MODEL=gpt-nano] [PRECISION=32-true] bench/bpe_vs_bytes.sh [STEPS] [V]
set -euo pipefail
steps="${1:-400}"
vocab="${2:-4096}"
cd "$(dirname "$0")/.."
export MIXTRAIN_DATA_DIR="${MIXTRAIN_DATA_DIR:-$(pwd)/build/data}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cp "$MIXTRAIN_DATA_DIR/fortunes.txt" "$tmp/corpus.txt"
lscpu | sed -n 's/^Model name: *//p;s/^Model: *//p' | paste -sd' '
build/mixtrain tokenizer train --data "$tmp/corpus.txt" --vocab-size "$vocab" --output "$tmp/tok"
model="${MODEL:-gpt-mini}"
precision="${PRECISION:-bf16-mixed}"
case "$model" in gpt-nano) T=128 ;; gpt-mini) T=256 ;; gpt2-small) T=1024 ;; *) echo "MODEL: a preset" >&2; exit 2 ;; esac
common=(--threads 2 train --model "$model" --precision "$precision" --batch-size 16 --seq-len "$T" --data "$tmp/corpus.txt")
build/mixtrain "${common[@]}" --steps "$steps" --warmup 40 --json "$tmp/bytes.json" | tail -1
# The BPE model's FLOPs per token, from a 2-step probe (also writes the token file).
build/mixtrain "${common[@]}" --tokenizer "$tmp/tok" --steps 2 --warmup 1 --json "$tmp/probe.json" >/dev/null
bpe_steps=$(python3 - "$tmp" "$steps" <<'PY'
import json, sys
tmp, steps = sys.argv[1], int(sys.argv[2])
f = lambda p: (lambda j: j["model_flops_per_s"] / j["tokens_per_s"])(json.load(open(f"{tmp}/{p}.json")))
print(max(1, round(steps * f("bytes") / f("probe"))))
PY
)
build/mixtrain "${common[@]}" --tokenizer "$tmp/tok" --steps "$bpe_steps" --warmup 40 --json "$tmp/bpe.json" | tail -1
python3 - "$tmp" "$steps" "$bpe_steps" "$vocab" "$model" "$precision" "$T" <<'PY'
import json, sys
tmp, steps, bpe_steps, vocab, model, precision, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:]
T = int(T)
print(f"{model}, {precision}, batch 16 x {T} tokens, 2 threads; equal model FLOPs")
print(f"{'data':<16}{'steps':>7}{'GFLOP/token':>13}{'train FLOPs':>13}{'val loss':>10}{'bits/byte':>11}{'tok/s':>9}")
for name, n, p in (("bytes (V=256)", steps, "bytes"), (f"BPE (V={vocab})", bpe_steps, "bpe")):
    j = json.load(open(f"{tmp}/{p}.json"))
    fpt = j["model_flops_per_s"] / j["tokens_per_s"]
    print(f"{name:<16}{n:>7}{fpt / 1e9:>13.4f}{fpt * n * 16 * T:>13.3e}{j['val_loss']:>10.4f}"
          f"{j['val_bits_per_byte']:>11.4f}{j['tokens_per_s']:>9.0f}")
PY
