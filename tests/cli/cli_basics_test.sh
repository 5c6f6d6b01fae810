#!/usr/bin/env bash
# The CLI's contract: --help everywhere, one-line errors with exit code 2 for unknown commands,
# options and bad values; `info` and `bench` produce their documented JSON.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"

expect_exit 0 "top-level --help" -- "$MIXTRAIN" --help
expect_exit 0 "train --help" -- "$MIXTRAIN" train --help
expect_exit 0 "bench gemm --help" -- "$MIXTRAIN" bench gemm --help
expect_exit 2 "no subcommand" -- "$MIXTRAIN"
expect_exit 2 "unknown subcommand" -- "$MIXTRAIN" frobnicate
expect_exit 2 "unknown option" -- "$MIXTRAIN" info --colour
expect_exit 2 "bad thread count" -- "$MIXTRAIN" --threads 0 info
expect_exit 2 "non-numeric value" -- "$MIXTRAIN" train --steps many
expect_exit 2 "bench without kind" -- "$MIXTRAIN" bench

expect_exit 0 "info --json" -- "$MIXTRAIN" info --json
if python3 - "$TMP/out" <<'PY'
import json, re, sys
j = json.load(open(sys.argv[1]))
assert re.fullmatch(r"\d+\.\d+\.\d+", j["onednn"]), j.get("onednn")
assert set(j["cpu_features"]) >= {"avx512f", "avx512_bf16", "amx_bf16", "f16c", "avx512_fp16"}, j
assert j["threads"] >= 1 and j["gemm"]["bf16"] and j["gemm"]["f32"]
assert "converted to fp32" in j["gemm"]["f16"] or j["cpu_features"]["avx512_fp16"], j["gemm"]["f16"]
PY
then pass; else fail "info --json content"; fi

expect_exit 0 "bench gemm --json" -- "$MIXTRAIN" --threads 1 bench gemm --min-seconds 0.01 --json "$TMP/gemm.json"
if python3 - "$TMP/gemm.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
shapes = {(r["m"], r["n"], r["k"]) for r in j["results"]}
assert shapes == {(1024, 1024, 1024), (2048, 2048, 2048), (2048, 768, 768), (2048, 3072, 768)}, shapes
assert {r["dtype"] for r in j["results"]} == {"f32", "bf16", "f16"}
assert all(r["gflops"] > 0 and r["direct_onednn_gflops"] > 0 for r in j["results"])
assert j["bf16_over_fp32"] > 0
PY
then pass; else fail "bench gemm JSON content"; fi

expect_exit 0 "bench convert" -- "$MIXTRAIN" bench convert --mib 4 --json "$TMP/conv.json"
grep -q '"gbytes_per_s"' "$TMP/conv.json" && pass || fail "bench convert JSON"

# An unwritable JSON path: one-line error, exit 2, no file left behind.
expect_exit 2 "unwritable --json" -- "$MIXTRAIN" bench convert --mib 1 --json "$TMP/no/such/dir/x.json"
[ ! -e "$TMP/no/such/dir/x.json.tmp" ] && pass || fail "temporary file left behind"

# --json [FILE] the same in every command: to FILE (the text output stays), or alone / - to stdout.
expect_exit 0 "info --json FILE" -- "$MIXTRAIN" info --json "$TMP/info.json"
grep -q "^cpu features:" "$TMP/out" && pass || fail "info --json FILE: the text output went away"
python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["gemm"]["f32"]' "$TMP/info.json" && pass || fail "info --json FILE content"
expect_exit 0 "info --json -" -- "$MIXTRAIN" info --json -
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$TMP/out" && pass || fail "info --json -: stdout is not JSON"
write_text "$TMP/text.txt"
TRAIN=("$MIXTRAIN" --threads 1 train --model gpt-nano --batch-size 2 --seq-len 16 --steps 2 --data "$TMP/text.txt")
expect_exit 0 "train --json FILE" -- "${TRAIN[@]}" --json "$TMP/summary.json"
grep -q "^done (32-true): 2 steps" "$TMP/out" && pass || fail "train --json FILE: no summary line: $(tail -n 2 "$TMP/out")"
python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["steps"] == 2' "$TMP/summary.json" && pass || fail "train --json FILE content"
expect_exit 0 "train --json (bare, as before)" -- "${TRAIN[@]}" --json
python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["steps"] == 2' "$TMP/out" && pass || fail "train --json: stdout is not the summary"
cp "$TMP/text.txt" "$TMP/text.bak"
expect_exit 2 "train --json over --data" -- "${TRAIN[@]}" --json "$TMP/text.txt"
expect_stderr_has "--json" "train --json over --data"
cmp -s "$TMP/text.txt" "$TMP/text.bak" && pass || fail "train --json over --data changed the data"
expect_exit 0 "numerics --advise --json FILE" -- "$MIXTRAIN" --threads 1 numerics --model gpt-nano --batch-size 2 \
  --seq-len 16 --data "$TMP/text.txt" --advise --json "$TMP/advice.json"
python3 -c 'import json, sys; assert "bf16-mixed" in json.load(open(sys.argv[1]))["modes"]' "$TMP/advice.json" && pass || fail "numerics --advise --json FILE content"

finish
