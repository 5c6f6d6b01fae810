#!/usr/bin/env bash
# Byte-level BPE speed, mixtrain against Hugging Face `tokenizers` (the peer), one thread each, side
# by side on the same vocabulary and text:
#   encode: every line of the built-in corpus (2.5 MB) with the fixture's 4,096-token vocabulary
#           (tests/fixtures/bpe), `mixtrain tokenizer encode --stats` (the encoding loop alone)
#           against ByteLevelBPETokenizer.encode_batch with RAYON_NUM_THREADS=1 (its encoding
#           alone, after loading); both start with an empty cache;
#   train:  the same corpus to that vocabulary, `mixtrain tokenizer train` (the training alone, as
#           it prints) against ByteLevelBPETokenizer.train (its whole call, reading the file
#           included);
# alternating ROUNDS times; medians and the ratio's spread. Needs a Python with tokenizers
# (PYTHON, default: .venv-dev/bin/python from tools/setup_dev_venv.sh). Run it on an idle machine:
#   bench/tokenizer_bench.sh [ROUNDS]
set -euo pipefail
rounds="${1:-5}"
cd "$(dirname "$0")/.."
py="${PYTHON:-.venv-dev/bin/python}"
corpus="${MIXTRAIN_DATA_DIR:-$(pwd)/build/data}/fortunes.txt"
vocab=tests/fixtures/bpe
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$py" -c 'import tokenizers' || { echo "tokenizer_bench: $py has no tokenizers (tools/setup_dev_venv.sh)" >&2; exit 2; }
lscpu | sed -n 's/^Model name: *//p;s/^Model: *//p' | paste -sd' '
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
for r in $(seq 1 "$rounds"); do
  build/mixtrain --threads 1 tokenizer encode --tokenizer "$vocab" --file "$corpus" --stats 2>"$tmp/m_enc.$r" >/dev/null
  "$py" - "$vocab" "$corpus" >"$tmp/h_enc.$r" <<'PY'
import sys, time
from tokenizers import ByteLevelBPETokenizer
tok = ByteLevelBPETokenizer(sys.argv[1] + "/vocab.json", sys.argv[1] + "/merges.txt")
text = open(sys.argv[2], "rb").read().decode("utf-8")
lines = text.split("\n")
if lines and lines[-1] == "": lines.pop()
t = time.perf_counter(); enc = tok.encode_batch(lines); s = time.perf_counter() - t
print(s, sum(len(e.ids) for e in enc))
PY
  build/mixtrain --threads 1 tokenizer train --data "$corpus" --vocab-size 4096 --output "$tmp/m_vocab" >"$tmp/m_train.$r"
  "$py" - "$corpus" >"$tmp/h_train.$r" <<'PY'
import sys, time
from tokenizers import ByteLevelBPETokenizer
t = time.perf_counter()
ByteLevelBPETokenizer().train([sys.argv[1]], vocab_size=4096, min_frequency=2, show_progress=False)
print(time.perf_counter() - t)
PY
done
cmp -s "$tmp/m_vocab/merges.txt" "$vocab/merges.txt" || echo "WARNING: mixtrain's merges differ from the fixture's"
python3 - "$tmp" "$rounds" "$(stat -c %s "$corpus")" <<'PY'
import re, statistics, sys
tmp, rounds, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
m_enc, h_enc, m_tr, h_tr = [], [], [], []
for r in range(1, rounds + 1):
    m = re.search(r"(\d+) tokens in ([0-9.]+) s", open(f"{tmp}/m_enc.{r}").read())
    m_enc.append(float(m.group(2))); mt = int(m.group(1))
    s, ht = open(f"{tmp}/h_enc.{r}").read().split(); h_enc.append(float(s)); ht = int(ht)
    m_tr.append(float(re.search(r"in ([0-9.]+) s", open(f"{tmp}/m_train.{r}").read()).group(1)))
    h_tr.append(float(open(f"{tmp}/h_train.{r}").read()))
if mt != ht: print(f"WARNING: token counts differ: mixtrain {mt}, tokenizers {ht}")
def row(name, m, h):
    ratios = sorted(b / a for a, b in zip(m, h))
    print(f"{name:<8}{statistics.median(m):>12.3f}{statistics.median(h):>14.3f}"
          f"{statistics.median(ratios):>9.2f}x  {ratios[0]:.2f}-{ratios[-1]:.2f}")
print(f"{size / 1e6:.2f} MB, {mt} tokens, 1 thread, {rounds} alternating rounds; seconds (median); "
      "speed ratio = tokenizers' time / mixtrain's")
print(f"{'':<8}{'mixtrain s':>12}{'tokenizers s':>14}{'ratio':>10}  spread")
row("encode", m_enc, h_enc)
row("train", m_tr, h_tr)
PY
