#!/usr/bin/env bash
# The crash test's CI form (scripts/crash_test.sh): 20 SIGKILLs at random moments and inside
# checkpoint writes, each followed by a resume; the final step log must equal an uninterrupted
# run's. About 10 s.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"
SCRIPT="${MIXTRAIN_SOURCE_DIR:-$(dirname "$0")/../..}/scripts/crash_test.sh"
for mode in 16-mixed bf16-true; do
  if bash "$SCRIPT" "$MIXTRAIN" --kills 20 --precision "$mode"; then pass; else fail "crash test in $mode"; fi
done
finish
