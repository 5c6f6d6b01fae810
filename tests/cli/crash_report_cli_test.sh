#!/usr/bin/env bash
# A crash reports where it happened (apps/mixtrain/crash_report.cpp): a run that gets SIGSEGV or
# SIGABRT (glibc's abort on a corrupted heap) dies of that signal (exit 139, 134) after one
# "mixtrain: fatal:" line whose offsets addr2line resolves to this build's functions, down to
# main. The run is stopped at a known place: start-up, blocked opening a FIFO no one writes (the
# libc call unwinds into mixtrain's frames; a signal landing in oneDNN's JIT code, which has no
# unwind tables, would end the backtrace there). In the sanitizer build, where the handler is not
# installed, the sanitizer's own report of the SIGSEGV stands in its place.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"

write_tiny_model "$TMP/tiny.json" 2 32 32
mkfifo "$TMP/fifo"
sanitized=$("$MIXTRAIN" info --json | python3 -c "import json,sys; print(json.load(sys.stdin)['build']['sanitizers'])")

for sig in SEGV ABRT; do
  "$MIXTRAIN" --threads 1 train --model "$TMP/tiny.json" --batch-size 8 --seq-len 32 --data "$TMP/fifo" \
    --max-data-bytes 100000 >"$TMP/$sig.out" 2>"$TMP/$sig.err" &
  pid=$!
  # Until it sits in openat (syscall 257 on x86-64) on the FIFO.
  for _ in $(seq 500); do
    [ "$(cut -d' ' -f1 "/proc/$pid/syscall" 2>/dev/null)" = 257 ] && break
    sleep 0.01
  done
  kill -"$sig" "$pid"
  wait "$pid"
  code=$?
  want=$([ "$sig" = SEGV ] && echo 139 || echo 134)
  if [ "$sanitized" = True ]; then
    if [ "$sig" = SEGV ]; then
      [ "$code" != 0 ] && grep -q "Sanitizer" "$TMP/$sig.err" && pass ||
        fail "SIGSEGV (sanitizer build): exit $code, stderr: $(head -c 300 "$TMP/$sig.err")"
    else
      [ "$code" = 134 ] && pass || fail "SIGABRT (sanitizer build): exit $code, expected 134"
    fi
    continue
  fi
  [ "$code" = "$want" ] && pass || fail "SIG$sig: exit $code, expected $want"
  [ "$(grep -c "^mixtrain: fatal: SIG$sig" "$TMP/$sig.err")" = 1 ] && pass ||
    fail "SIG$sig: not one fatal line; stderr: $(head -c 300 "$TMP/$sig.err")"
  detail=$(crash_detail "$TMP/$sig.err")
  for frame in "mixtrain::train(" "^main "; do
    grep -q "$frame" <<<"$detail" && pass || fail "SIG$sig: no frame '$frame' in the backtrace: $detail"
  done
done

finish
