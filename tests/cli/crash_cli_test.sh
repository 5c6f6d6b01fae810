#!/usr/bin/env bash
# The crash test's CI form (scripts/crash_test.sh): 20 SIGKILLs at random moments and inside
# checkpoint writes, each followed by a resume; the final step log must equal an uninterrupted
# run's. About 20 s; in the sanitizer build, where every start of the program costs seconds, 8
# kills per mode (the same paths: kills at random moments and inside checkpoint writes).
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"
SCRIPT="${MIXTRAIN_SOURCE_DIR:-$(dirname "$0")/../..}/scripts/crash_test.sh"
kills=20
"$MIXTRAIN" info --json "$TMP/info.json" >/dev/null || fail "mixtrain info --json"
python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["build"]["sanitizers"] else 1)' \
  "$TMP/info.json" && kills=8
for mode in 16-mixed bf16-true; do
  if bash "$SCRIPT" "$MIXTRAIN" --kills "$kills" --precision "$mode"; then pass; else fail "crash test in $mode"; fi
done
finish
