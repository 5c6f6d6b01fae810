#!/usr/bin/env bash
# The CLI runs OpenMP with a bounded spin (GOMP_SPINCOUNT=1000: threads spin ~10 us between
# parallel regions, then sleep), so a run degrades gracefully when another process holds a core;
# a policy the user set (OMP_WAIT_POLICY, GOMP_SPINCOUNT) is kept. The speed itself is measured by hand (README), not
# here: a CI machine's load is not under the test's control.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"

write_text "$TMP/text.txt"
write_tiny_model "$TMP/tiny.json" 1 16 16

# policy_of [ENV...]: OMP_WAIT_POLICY/GOMP_SPINCOUNT in the environment of a running `mixtrain train`.
policy_of() {
  env "$@" "$MIXTRAIN" --threads 2 train --model "$TMP/tiny.json" --data "$TMP/text.txt" --batch-size 4 --seq-len 16 \
    --steps 1000000 >/dev/null 2>&1 &
  local pid=$! got=""
  for _ in $(seq 1 100); do
    got=$({ tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null | grep -E '^(OMP_WAIT_POLICY|GOMP_SPINCOUNT)=' | sort | tr '\n' ' ')
    [ -n "$got" ] && break
    sleep 0.05
  done
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  echo "${got:-unset}"
}

p=$(policy_of -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT)
[ "$p" = "GOMP_SPINCOUNT=1000 " ] && pass || fail "default OpenMP wait: '$p', expected GOMP_SPINCOUNT=1000 alone"
p=$(policy_of -u GOMP_SPINCOUNT OMP_WAIT_POLICY=active)
[ "$p" = "OMP_WAIT_POLICY=active " ] && pass || fail "a user's OMP_WAIT_POLICY=active was not kept alone: '$p'"
p=$(policy_of -u OMP_WAIT_POLICY GOMP_SPINCOUNT=50)
[ "$p" = "GOMP_SPINCOUNT=50 " ] && pass || fail "a user's GOMP_SPINCOUNT=50 was not kept alone: '$p'"
# Exit codes and arguments survive the re-execution.
expect_exit 2 "an error after re-execution" -- env -u OMP_WAIT_POLICY "$MIXTRAIN" train --steps 0
expect_stderr_has "--steps must be positive" "an error after re-execution"

finish
