#!/usr/bin/env python3
"""Writes tests/fixtures/bpe/: what Hugging Face `tokenizers` (ByteLevelBPETokenizer, default
options) does on mixtrain's built-in corpus, for tests/data/bpe_fixture_test.cpp:

  vocab.json, merges.txt   ByteLevelBPETokenizer().train([corpus], vocab_size=N, min_frequency=2)
                           saved with save_model (mixtrain's train_bpe must give these files'
                           tokens and merges exactly)
  ids.txt.xz               the ids that ByteLevelBPETokenizer(vocab.json, merges.txt) gives

ids.txt.xz (UTF-8 text, xz-compressed), one section after another:
    mixtrain-bpe-fixture 1
    # comment lines
    section NAME COUNT
    CRC ID ID ...          one line per text: CRC-32 (hex) of the text's UTF-8 bytes, then its ids
Sections: lines (every line of the corpus without its '\\n', in order, empty ones included),
blocks (the corpus cut into pieces of about 4,000 bytes at line ends, newlines kept, so the
whitespace rules meet line breaks; every 10th piece), and classes:
    FIRST LAST CLASS       for every code point in [FIRST, LAST] (hex; surrogates left out), the
                           class the ByteLevel pre-tokenizer's regex gives it: L (joins "a"), N
                           (joins "1"), S (joins a tab), O (joins "!"); ranges merged.
Development only (tools/setup_dev_venv.sh installs tokenizers); the test reads the files, never
Python. Usage: make_bpe_fixture.py [--corpus FILE] [--vocab-size N] [--out DIR]
"""
import argparse
import lzma
import os
import sys
import tempfile
import zlib

import tokenizers
from tokenizers import ByteLevelBPETokenizer


def crc(s):
    return "%08x" % (zlib.crc32(s.encode("utf-8")) & 0xFFFFFFFF)


def classes(pre):
    """The class of every code point under the ByteLevel pre-tokenizer, as merged ranges."""
    def joins(prefix, c):
        return len(pre.pre_tokenize_str(prefix + c)) == 1

    out = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        k = [name for name, p in (("L", "a"), ("N", "1"), ("S", "\t"), ("O", "!")) if joins(p, c)]
        if len(k) != 1:
            sys.exit("code point %04X joins %s: not one class" % (cp, k))
        if out and out[-1][2] == k[0] and out[-1][1] == cp - 1:
            out[-1][1] = cp
        elif out and out[-1][2] == k[0] and out[-1][1] == 0xD7FF and cp == 0xE000:
            out[-1][1] = cp  # across the surrogates
        else:
            out.append([cp, cp, k[0]])
    return out


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default=os.path.join(repo, "build", "data", "fortunes.txt"))
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--out", default=os.path.join(repo, "tests", "fixtures", "bpe"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    trainer = ByteLevelBPETokenizer()
    trainer.train([a.corpus], vocab_size=a.vocab_size, min_frequency=2, show_progress=False)
    trainer.save_model(a.out)
    tok = ByteLevelBPETokenizer(os.path.join(a.out, "vocab.json"), os.path.join(a.out, "merges.txt"))

    with open(a.corpus, "rb") as f:
        text = f.read().decode("utf-8")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    blocks, cur = [], ""
    for l in text.splitlines(keepends=True):
        cur += l
        if len(cur.encode("utf-8")) >= 4000:
            blocks.append(cur)
            cur = ""
    if cur:
        blocks.append(cur)
    blocks = blocks[::10]

    out = ["mixtrain-bpe-fixture 1",
           "# tools/make_bpe_fixture.py, tokenizers %s, corpus %s (%d bytes, CRC-32 %s), vocab_size %d"
           % (tokenizers.__version__, os.path.basename(a.corpus), len(text.encode("utf-8")), crc(text),
              a.vocab_size)]
    for name, texts in (("lines", lines), ("blocks", blocks)):
        out.append("section %s %d" % (name, len(texts)))
        for t, enc in zip(texts, tok.encode_batch(texts)):
            out.append(" ".join([crc(t)] + [str(i) for i in enc.ids]))
    cls = classes(tok._tokenizer.pre_tokenizer)
    out.append("section classes %d" % len(cls))
    out.extend("%04X %04X %s" % tuple(r) for r in cls)
    data = ("\n".join(out) + "\n").encode("utf-8")
    with tempfile.NamedTemporaryFile(dir=a.out, delete=False) as f:
        f.write(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
    os.chmod(f.name, 0o644)
    os.replace(f.name, os.path.join(a.out, "ids.txt.xz"))
    print("wrote %s: %d lines, %d blocks, %d class ranges" % (a.out, len(lines), len(blocks), len(cls)))


if __name__ == "__main__":
    main()
