#!/usr/bin/env bash
# ZeRO stages side by side on this machine, for a quiet run (meaningless while other work shares
# the cores): gpt-mini bf16-mixed, 2 ranks x 1 thread, --zero 1, 2 and 3 in alternating rounds
# (1, 2, 3, 1, 2, 3, ...), the same batches. Prints each round's tokens/s, then per stage the
# median and the spread (min-max) and the median of the per-round ratios to --zero 1, and the
# parameter bytes a rank gathered per step under --zero 3.
# Usage: bench/zero_stages.sh [MIXTRAIN] [ROUNDS] [STEPS] [BUCKET_MB]   (as root: sets OMPI_ALLOW_RUN_AS_ROOT*)
set -euo pipefail
MIXTRAIN="${1:-build/mixtrain}"
ROUNDS="${2:-3}"
STEPS="${3:-20}"
BUCKET="${4:-4}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RUN=(train --model gpt-mini --precision bf16-mixed --batch-size 8 --seq-len 128 --steps "$STEPS" --threads 1
     --bucket-mb "$BUCKET" --json)
MPI=(mpirun -np 2 --bind-to core -x OMP_NUM_THREADS=1)
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; gpt-mini bf16-mixed, batch 8 x 128 per rank, $STEPS steps, --bucket-mb $BUCKET"
for r in $(seq 1 "$ROUNDS"); do
  for z in 1 2 3; do
    "${MPI[@]}" "$MIXTRAIN" "${RUN[@]}" --zero "$z" >"$OUT/r${r}z$z.json"
  done
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
tps = {z: [json.load(open(f"{out}/r{r}z{z}.json"))["tokens_per_s"] for r in range(1, rounds + 1)] for z in (1, 2, 3)}
for r in range(rounds):
    print(f"round {r + 1}: " + "  ".join(f"zero {z} {tps[z][r]:8.0f} tok/s" for z in (1, 2, 3)))
for z in (1, 2, 3):
    ratios = [tps[z][r] / tps[1][r] for r in range(rounds)]
    print(f"--zero {z}: median {statistics.median(tps[z]):8.0f} tok/s (spread {min(tps[z]):.0f}-{max(tps[z]):.0f}); "
          f"vs --zero 1 per round: median {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
s = json.load(open(f"{out}/r1z3.json"))
print(f"--zero 3: {s.get('param_gather_bytes_per_step', float('nan')):.0f} parameter bytes gathered per step by rank 0; "
      f"{s['grad_reduce_bytes_per_step']:.0f} gradient bytes sent")
PY
