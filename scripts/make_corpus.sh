#!/usr/bin/env bash
# Builds mixtrain's built-in training corpus from Debian's `fortunes` package (scripts/setup.sh
# installs it). Usage: scripts/make_corpus.sh OUT_PATH   (e.g. build/data/fortunes.txt)
#
# The English fortune files of $FORTUNES_DIR (default /usr/share/games/fortunes): every file
# without an extension that has a .dat index beside it, in sorted (C locale) order; the off/
# subfolder and the *.u8 duplicates are left out. Each lone '%' separator line becomes an empty
# line. About 2.5 MB. Written atomically (temporary file + mv); does nothing when OUT_PATH is
# newer than every source file and this script.
set -euo pipefail
export LC_ALL=C

if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: make_corpus.sh OUT_PATH" >&2
  exit 2
fi
out="$1"
src="${FORTUNES_DIR:-/usr/share/games/fortunes}"

if [ ! -d "$src" ]; then
  echo "make_corpus: $src not found; install the 'fortunes' package (scripts/setup.sh)" >&2
  exit 1
fi

sources=()
for f in "$src"/*; do  # glob order is sorted in the C locale
  name="$(basename "$f")"
  case "$name" in *.*) continue ;; esac   # .dat indexes, .u8 duplicates, anything else
  [ -f "$f" ] && [ -f "$f.dat" ] || continue  # a fortune file has its .dat index beside it
  sources+=("$f")
done
if [ ${#sources[@]} -eq 0 ]; then
  echo "make_corpus: no fortune files (NAME with NAME.dat) in $src" >&2
  exit 1
fi

if [ -f "$out" ]; then
  stale=0
  for f in "${sources[@]}" "$0"; do
    if [ "$f" -nt "$out" ]; then stale=1; break; fi
  done
  if [ "$stale" -eq 0 ]; then
    echo "make_corpus: $out is up to date"
    exit 0
  fi
fi

mkdir -p "$(dirname "$out")"
tmp="$(mktemp "$out.tmp.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
sed 's/^%$//' "${sources[@]}" > "$tmp"
chmod 644 "$tmp"
mv -f "$tmp" "$out"
trap - EXIT
echo "make_corpus: wrote $out ($(wc -c < "$out") bytes from ${#sources[@]} files)"
