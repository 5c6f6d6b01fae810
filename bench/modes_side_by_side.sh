#!/usr/bin/env bash
# Every precision mode of one binary side by side: `bench train` (gpt-mini, batch 16, seq 256,
# 2 threads), the modes alternating within each of ROUNDS rounds so that drift on a shared machine
# (AMX throughput swings 3-5x on the shared Xeons) hits them alike; then per mode the median
# tokens/s, its range, the ratio of medians to 32-true, and the median step breakdown.
#   bench/modes_side_by_side.sh [BINARY] [ROUNDS] [STEPS]
# A mode may carry flags: "32-true --matmul-precision medium". MODES="a;b;c" replaces the list
# (the ratio column is then against its first entry), e.g. the fp8 recipes beside bf16-mixed:
#   MODES="bf16-mixed;fp8-mixed --fp8-recipe delayed;fp8-mixed --fp8-recipe mxfp8" bench/modes_side_by_side.sh
# Run it on an idle machine.
set -euo pipefail
bin="${1:-build/mixtrain}"
rounds="${2:-3}"
steps="${3:-6}"
cd "$(dirname "$0")/.."
if [[ -n "${MODES:-}" ]]; then
  IFS=';' read -r -a MODES <<<"$MODES"
else
  MODES=("32-true" "32-true --matmul-precision medium" "bf16-mixed" "16-mixed" "bf16-true")
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$bin" info | sed -n '2,9p'
for r in $(seq 1 "$rounds"); do
  i=0
  for m in "${MODES[@]}"; do
    # shellcheck disable=SC2086
    set -- $m
    p="$1"
    shift
    "$bin" --threads 2 bench train --model gpt-mini --precision "$p" "$@" --batch-size 16 --seq-len 256 \
      --steps "$steps" --json "$tmp/$i.$r.json" >/dev/null
    i=$((i + 1))
  done
done
python3 - "$tmp" "$rounds" "${MODES[@]}" <<'PY'
import json, statistics, sys
tmp, rounds, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def run(i, r):
    j = json.load(open(f"{tmp}/{i}.{r}.json"))
    return j["runs"][0] if isinstance(j, dict) and "runs" in j else j
base = None
print(f"{'mode':<36}{'tok/s':>8}{'range':>16}{'x first':>10}   ms/step: gemm attention norm elementwise casts step (x roofline)")
for i, m in enumerate(modes):
    rs = [run(i, r) for r in range(1, rounds + 1)]
    tok = [x["tokens_per_s"] for x in rs]
    med = statistics.median(tok)
    base = base or med
    def bd(name):
        vals = []
        for x in rs:
            v = x["roofline"]["work"][name]["seconds"]
            vals.append(v * 1e3)
        return statistics.median(vals)
    step = statistics.median(x["roofline"]["step_seconds"] * 1e3 for x in rs)
    over = statistics.median(x["roofline"]["step_over_limit"] for x in rs)
    parts = " ".join(f"{bd(k):.0f}" for k in ("gemm", "attention", "normalization", "elementwise", "casts"))
    print(f"{m:<36}{med:>8.0f}{f'{min(tok):.0f}-{max(tok):.0f}':>16}{med / base:>10.2f}   {parts} {step:.0f} ({over:.2f}x)")
PY
