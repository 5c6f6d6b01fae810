#!/usr/bin/env bash
# Data-parallel fine-tuning and the cost of --exact-grad-accum on this machine, for a quiet run
# (the numbers are meaningless while other work shares the cores). MiniLM on Fine Foods,
# bf16-mixed, batch 16, max length 128, STEPS optimizer steps of 2 micro-batches each, ROUNDS
# rounds of every configuration in turn (medians reported):
#   one process x 2 threads, --grad-accum 2                       (the baseline)
#   one process x 2 threads, --grad-accum 2 --exact-grad-accum    (its cost: time and memory)
#   2 ranks x 1 thread, fp32 sums (25 MiB buckets)                (the goal: >= 0.9x the baseline)
#   2 ranks x 1 thread, --zero 1                                  (rank 0's memory)
# and gpt-mini bf16-mixed (bench train, batch 8, sequence 256) with and without --exact-grad-accum.
# Prints tokens/s (non-padding tokens), the ratio to the baseline and the peak bytes (rank 0's).
# Usage: bench/finetune_scaling.sh [MIXTRAIN] [STEPS] [ROUNDS]   (as root: sets OMPI_ALLOW_RUN_AS_ROOT*)
set -euo pipefail
MIXTRAIN="${1:-build/mixtrain}"
STEPS="${2:-12}"
ROUNDS="${3:-3}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
FT=(finetune --precision bf16-mixed --batch-size 16 --max-len 128 --steps "$STEPS" --test-examples 16)
MPI=(mpirun -np 2 --bind-to core -x OMP_NUM_THREADS=1)
GPT=(bench train --model gpt-mini --precision bf16-mixed --batch-size 8 --seq-len 256 --steps "$STEPS" --grad-accum 2)

for r in $(seq 1 "$ROUNDS"); do
  OMP_NUM_THREADS=2 "$MIXTRAIN" --threads 2 "${FT[@]}" --grad-accum 2 --json "$OUT/fused.$r.json" >/dev/null
  OMP_NUM_THREADS=2 "$MIXTRAIN" --threads 2 "${FT[@]}" --grad-accum 2 --exact-grad-accum --json "$OUT/exact.$r.json" >/dev/null
  "${MPI[@]}" "$MIXTRAIN" --threads 1 "${FT[@]}" --json "$OUT/ranks.$r.json" >/dev/null
  "${MPI[@]}" "$MIXTRAIN" --threads 1 "${FT[@]}" --zero 1 --json "$OUT/zero.$r.json" >/dev/null
  OMP_NUM_THREADS=2 "$MIXTRAIN" --threads 2 "${GPT[@]}" --json "$OUT/gpt_fused.$r.json" >/dev/null
  OMP_NUM_THREADS=2 "$MIXTRAIN" --threads 2 "${GPT[@]}" --exact-grad-accum --json "$OUT/gpt_exact.$r.json" >/dev/null
done

python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def runs(name):
    return [json.load(open(f"{out}/{name}.{r}.json")) for r in range(1, rounds + 1)]
def med(name, key):
    return statistics.median(j[key] for j in runs(name))
rows = [("fused", "MiniLM: 1 process x 2 threads, --grad-accum 2", "fused"),
        ("exact", "MiniLM: the same, --exact-grad-accum", "fused"),
        ("ranks", "MiniLM: 2 ranks x 1 thread, fp32 sums", "fused"),
        ("zero", "MiniLM: 2 ranks x 1 thread, --zero 1", "fused"),
        ("gpt_fused", "gpt-mini: 1 process x 2 threads, --grad-accum 2", "gpt_fused"),
        ("gpt_exact", "gpt-mini: the same, --exact-grad-accum", "gpt_fused")]
print("%-50s %10s %8s %12s %12s" % ("run (median of %d)" % rounds, "tokens/s", "ratio", "peak MiB", "grads MiB"))
for name, label, base in rows:
    tps, b = med(name, "tokens_per_s"), med(base, "tokens_per_s")
    j = runs(name)[0]
    peak = j["peak_bytes"] / 2**20
    grads = j.get("peak_bytes_by_category", {}).get("gradients")  # bench train reports the total only
    print("%-50s %10.0f %8.3f %12.1f %12s" % (label, tps, tps / b, peak, "-" if grads is None else "%.1f" % (grads / 2**20)))
PY
