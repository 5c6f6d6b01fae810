#!/usr/bin/env bash
# `sample` with a KV cache: the same greedy tokens as re-running the window (--no-kv-cache) while
# the context fits in block_size, generation past block_size, and tokens streamed to stdout as
# they are drawn (the first ones arrive while the command still runs); --n-head and --top-k warned
# about where they do nothing.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"

write_text "$TMP/text.txt"
write_tiny_model "$TMP/tiny.json" 2 32 64
expect_exit 0 "a checkpoint" -- "$MIXTRAIN" --threads 1 train --model "$TMP/tiny.json" --data "$TMP/text.txt" \
  --batch-size 4 --seq-len 64 --steps 40 --lr 3e-3 --checkpoint-dir "$TMP/ck"
SAMPLE=("$MIXTRAIN" --threads 1 sample --checkpoint "$TMP/ck")

# Prompt "line " (5 tokens) + 59 new tokens = block_size 64: every token from the cache.
for t in 0 0.8; do
  expect_exit 0 "cached, temperature $t" -- "${SAMPLE[@]}" --prompt "line " --tokens 59 --temperature "$t" --seed 3
  cp "$TMP/out" "$TMP/cached.txt"
  expect_exit 0 "window, temperature $t" -- "${SAMPLE[@]}" --prompt "line " --tokens 59 --temperature "$t" --seed 3 --no-kv-cache
  if cmp -s "$TMP/cached.txt" "$TMP/out"; then pass; else
    fail "temperature $t: the KV cache gave other tokens: '$(head -c 100 "$TMP/cached.txt")' vs '$(head -c 100 "$TMP/out")'"
  fi
done
[ "$(head -c 5 "$TMP/cached.txt")" = "line " ] && [ "$(wc -c <"$TMP/cached.txt")" -ge 65 ] && pass ||
  fail "sample output is not the prompt and 59 tokens: $(head -c 100 "$TMP/cached.txt")"

# Past block_size the cache is rebuilt from the last half block: 300 tokens, each one printed.
expect_exit 0 "past block_size" -- "${SAMPLE[@]}" --prompt "line " --tokens 300 --temperature 0.8
python3 -c "import sys; d=open(sys.argv[1],'rb').read(); assert len(d) >= 5 + 300 + 1, len(d)" "$TMP/out" && pass ||
  fail "past block_size: $(wc -c <"$TMP/out") bytes"

# Streaming: the first tokens are on stdout while the command still runs.
"${SAMPLE[@]}" --prompt "line " --tokens 100000000 --temperature 0.8 >"$TMP/stream.txt" 2>"$TMP/stream.err" &
pid=$!
streamed=no
for _ in $(seq 1 600); do
  if [ "$(wc -c <"$TMP/stream.txt")" -gt 20 ] && kill -0 "$pid" 2>/dev/null; then streamed=yes; break; fi
  sleep 0.05
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
[ "$streamed" = yes ] && pass || fail "no token arrived on stdout while sample was running"

# Options without effect: warned about, naming the flag.
expect_exit 0 "--n-head on a checkpoint" -- "${SAMPLE[@]}" --tokens 2 --n-head 3
expect_stderr_has "warning: --n-head 3 has no effect" "--n-head on a checkpoint"
expect_exit 0 "--top-k when greedy" -- "${SAMPLE[@]}" --tokens 2 --temperature 0 --top-k 5
expect_stderr_has "warning: --top-k has no effect" "--top-k when greedy"

finish
