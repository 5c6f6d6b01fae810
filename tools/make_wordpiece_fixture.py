#!/usr/bin/env python3
"""Writes tests/fixtures/wordpiece_ids.txt.xz: the token ids Hugging Face's BERT tokenizer gives
for every text mixtrain's WordPiece tokenizer is checked on (tests/data/wordpiece_fixture_test.cpp).

The tokenizer is loaded from the model folder with transformers' AutoTokenizer.from_pretrained(dir)
(not BertTokenizerFast(vocab_file=...), which in transformers 5 silently builds a 5-token
vocabulary), and cross-checked against tokenizers' Tokenizer.from_file(dir/tokenizer.json).
Development only (tools/setup_dev_venv.sh installs transformers and tokenizers); the test reads
the fixture, never Python.

Format (UTF-8 text, xz-compressed), one section after another:
    mixtrain-wordpiece-fixture 1
    # comment lines
    section NAME COUNT [MAX_LEN]
    CRC ID ID ...            one line per text: CRC-32 (hex) of the text's UTF-8 bytes (pairs:
                             of text a, a tab, text b), then encode(text) with [CLS]/[SEP]
Sections: finefoods/train.tsv and finefoods/test.tsv (every review, in file order, no
truncation), fortunes (every entry of mixtrain's fortunes topic task in file order, no
truncation), pairs (review i and review i+1 of finefoods/test.tsv as a pair, truncated to 64 with
longest_first), truncate (the first 200 test reviews truncated to 128), and codepoints:
    FIRST LAST ID ...        for every code point c in [FIRST, LAST] (hex; surrogates left out),
                             "x" + c + "x" encodes to these ids (without [CLS]/[SEP]); ranges
                             of identical ids are merged.
Usage: make_wordpiece_fixture.py [--model DIR] [--data DIR] [--fortunes DIR] [--out FILE]
"""
import argparse
import lzma
import os
import sys
import zlib

TOPICS = ["computers", "food", "love", "politics", "science", "sports", "startrek", "medicine",
          "law", "pets", "linux", "education"]


def read_tsv_column(path, column):
    with open(path, "rb") as f:
        lines = f.read().decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    header = lines[0].rstrip("\r").split("\t")
    k = header.index(column)
    out = []
    for l in lines[1:]:
        if l.endswith("\r"):
            l = l[:-1]
        if l.strip(" \t\r") == "":
            continue
        out.append(l.split("\t")[k])
    return out


def fortunes_entries(d):
    """The entries of text_classification.cpp's fortunes_topic_entries, same rules, same order."""
    out = []
    for topic in TOPICS:
        with open(os.path.join(d, topic), "rb") as f:
            text = f.read().decode("utf-8")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        entry = ""

        def finish():
            t = entry.strip(" \t\r\n")
            if len(t.encode("utf-8")) > 20:
                out.append(t)

        for l in lines:
            if l.endswith("\r"):
                l = l[:-1]
            if l == "%":
                finish()
                entry = ""
            else:
                entry += l + "\n"
        finish()
    return out


def crc(s):
    return "%08x" % (zlib.crc32(s.encode("utf-8")) & 0xFFFFFFFF)


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(repo, "data/models/all-minilm-l6-v2"))
    ap.add_argument("--data", default=os.path.join(repo, "data/finefoods"))
    ap.add_argument("--fortunes", default="/usr/share/games/fortunes")
    ap.add_argument("--out", default=os.path.join(repo, "tests/fixtures/wordpiece_ids.txt.xz"))
    a = ap.parse_args()

    import tokenizers
    import transformers
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(a.model)
    raw = tokenizers.Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    raw.no_truncation()
    raw.no_padding()
    if len(tok) != 30522:
        sys.exit(f"make_wordpiece_fixture: AutoTokenizer has {len(tok)} tokens, expected 30522")

    def enc(text, pair=None, max_len=None):
        kw = dict(add_special_tokens=True, padding=False)
        kw.update(truncation="longest_first", max_length=max_len) if max_len else kw.update(truncation=False)
        ids = tok(text, pair, **kw)["input_ids"] if pair is not None else tok(text, **kw)["input_ids"]
        if max_len is None:
            other = raw.encode(text, pair).ids if pair is not None else raw.encode(text).ids
            if other != ids:
                sys.exit(f"make_wordpiece_fixture: AutoTokenizer and tokenizer.json disagree on {text[:60]!r}")
        return ids

    out = ["mixtrain-wordpiece-fixture 1",
           f"# tools/make_wordpiece_fixture.py: transformers {transformers.__version__}, "
           f"tokenizers {tokenizers.__version__}, AutoTokenizer.from_pretrained(all-minilm-l6-v2)"]

    def section(name, texts, max_len=None):
        out.append(f"section {name} {len(texts)}" + (f" {max_len}" if max_len else ""))
        for t in texts:
            if isinstance(t, tuple):
                ids = enc(t[0], t[1], max_len)
                key = crc(t[0] + "\t" + t[1])
            else:
                ids = enc(t, None, max_len)
                key = crc(t)
            out.append(key + " " + " ".join(map(str, ids)))

    train = read_tsv_column(os.path.join(a.data, "train.tsv"), "review")
    test = read_tsv_column(os.path.join(a.data, "test.tsv"), "review")
    section("finefoods/train.tsv", train)
    section("finefoods/test.tsv", test)
    section("fortunes", fortunes_entries(a.fortunes))
    pairs = [(test[i], test[i + 1]) for i in range(len(test) - 1)]
    section("pairs", pairs, 64)
    section("truncate", test[:200], 128)

    # Every code point between two x's, without specials.
    rows = []
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    texts = ["x" + chr(c) + "x" for c in cps]
    ids_all = []
    for i in range(0, len(texts), 65536):
        ids_all += [e.ids for e in raw.encode_batch(texts[i:i + 65536], add_special_tokens=False)]
    for c, ids in zip(cps, ids_all):
        if rows and rows[-1][2] == ids and rows[-1][1] + 1 == c:
            rows[-1][1] = c
        elif rows and rows[-1][2] == ids and rows[-1][1] == 0xD7FF and c == 0xE000:
            rows[-1][1] = c
        else:
            rows.append([c, c, ids])
    out.append(f"section codepoints {len(rows)}")
    for first, last, ids in rows:
        out.append("%x %x %s" % (first, last, " ".join(map(str, ids))))

    data = ("\n".join(out) + "\n").encode("utf-8")
    tmp = a.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
    os.replace(tmp, a.out)
    print(f"make_wordpiece_fixture: wrote {a.out} ({len(data)} bytes, {os.path.getsize(a.out)} compressed; "
          f"{len(rows)} code point ranges)")


if __name__ == "__main__":
    main()
