#!/usr/bin/env bash
# ZeRO stages side by side on this machine, for a quiet run (meaningless while other work shares
# the cores): gpt-mini bf16-mixed, 2 ranks x 1 thread, --zero 1, 2 and 3 in alternating rounds
# (1, 2, 3, 1, 2, 3, ...), the same batches. Prints each round's tokens/s, then per stage the
# median and the spread (min-max) and the median of the per-round ratios to --zero 1, and the
# parameter bytes a rank gathered per step under --zero 3.
# VARIANTS: the runs of a round, each Z (--zero Z) or Z:W (--zero Z --allgather-dtype W), the ratios
# against the first; default "1 2 3". The compressed gathers: "3 3:bf16 3:int8 3:fp8".
# Usage: bench/zero_stages.sh [MIXTRAIN] [ROUNDS] [STEPS] [BUCKET_MB] [VARIANTS]   (as root: sets OMPI_ALLOW_RUN_AS_ROOT*)
set -euo pipefail
MIXTRAIN="${1:-build/mixtrain}"
ROUNDS="${2:-3}"
STEPS="${3:-20}"
BUCKET="${4:-4}"
VARIANTS="${5:-1 2 3}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RUN=(train --model gpt-mini --precision bf16-mixed --batch-size 8 --seq-len 128 --steps "$STEPS" --threads 1
     --bucket-mb "$BUCKET" --json)
MPI=(mpirun -np 2 --bind-to core -x OMP_NUM_THREADS=1)
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; gpt-mini bf16-mixed, batch 8 x 128 per rank, $STEPS steps, --bucket-mb $BUCKET"
for r in $(seq 1 "$ROUNDS"); do
  for v in $VARIANTS; do
    z="${v%%:*}" flags=()
    [ "$v" != "$z" ] && flags=(--allgather-dtype "${v#*:}")
    "${MPI[@]}" "$MIXTRAIN" "${RUN[@]}" --zero "$z" "${flags[@]}" >"$OUT/r${r}_${v/:/_}.json"
  done
done
# shellcheck disable=SC2086  # $VARIANTS: one argument each
python3 - "$OUT" "$ROUNDS" $VARIANTS <<'PY'
import json, statistics, sys
out, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
name = lambda v: "--zero " + v.replace(":", " --allgather-dtype ")
runs = {v: [json.load(open(f"{out}/r{r}_{v.replace(':', '_')}.json")) for r in range(1, rounds + 1)] for v in variants}
tps = {v: [s["tokens_per_s"] for s in runs[v]] for v in variants}
for r in range(rounds):
    print(f"round {r + 1}: " + "  ".join(f"{name(v)} {tps[v][r]:8.0f} tok/s" for v in variants))
first = variants[0]
for v in variants:
    ratios = [tps[v][r] / tps[first][r] for r in range(rounds)]
    s = runs[v][0]
    gathered = f"; {s['param_gather_bytes_per_step']:.0f} parameter bytes gathered per step" if "param_gather_bytes_per_step" in s else ""
    print(f"{name(v)}: median {statistics.median(tps[v]):8.0f} tok/s (spread {min(tps[v]):.0f}-{max(tps[v]):.0f}); "
          f"vs {name(first)} per round: median {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}); "
          f"{s['grad_reduce_bytes_per_step']:.0f} gradient bytes sent{gathered}")
PY
