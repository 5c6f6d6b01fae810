#!/usr/bin/env bash
# Records this machine's golden step logs (tests/golden/trajectories/, compared by
# tests/cli/golden_trajectories_test.sh) with the built CLI: replaces the file recorded on this
# machine (the same fingerprint, tests/golden/golden.py), or adds one named NAME (default: the
# CPU's vendor, family and model). Run it when a machine has no golden yet, or when a change of
# the numbers is intended; then say why in the commit, and remove the goldens of machines you
# could not re-record on.
# Usage: tools/make_golden_trajectories.sh [BINARY [NAME]]
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-build/mixtrain}"
export MIXTRAIN_DATA_DIR="${MIXTRAIN_DATA_DIR:-$(pwd)/build/data}"
. tests/golden/golden_runs.sh
dir=tests/golden/trajectories
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
golden_fingerprint "$bin" "$tmp/fp.json"
if ! out="$(python3 tests/golden/golden.py find "$dir" "$tmp/fp.json")"; then
  name="${2:-$(python3 tests/golden/golden.py name "$tmp/fp.json")}"
  out="$dir/$name.jsonl"
  [ -e "$out" ] && { echo "$out exists and was recorded on another machine: give another NAME" >&2; exit 2; }
fi
name="$(basename "$out" .jsonl)"
python3 tests/golden/golden.py header "$name" "$tmp/fp.json" >"$tmp/golden.jsonl"
golden_record "$bin" "$tmp/steps.jsonl"
cat "$tmp/steps.jsonl" >>"$tmp/golden.jsonl"
mv "$tmp/golden.jsonl" "$out"
echo "recorded $(wc -l <"$tmp/steps.jsonl") steps into $out"
