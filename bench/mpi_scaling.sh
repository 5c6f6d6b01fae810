#!/usr/bin/env bash
# Data-parallel speed on this machine, for a quiet run (the numbers are meaningless while other
# work shares the cores): gpt-mini bf16-mixed,
#   one process x 2 threads, --grad-accum 2           (the baseline: the same work as 2 ranks)
#   one process x 1 thread                            (one rank's compute, for the scaling model)
#   2 ranks x 1 thread: fp32 sums with overlap (25 MiB buckets), without overlap (one bucket,
#   started when backward ends), and bf16 sums with overlap
# Prints tokens/s, the 2-rank/1-process ratio (the goal: >= 0.9), the share of buckets started
# during backward, the window from the first bucket's start to the end of backward (what overlap
# can hide; about 0 with one bucket) and the wait for the sums after backward, then bench/scaling_model.py's prediction of the
# 2-rank step against the measured one.
# Usage: bench/mpi_scaling.sh [MIXTRAIN] [STEPS]   (as root: sets OMPI_ALLOW_RUN_AS_ROOT*)
set -euo pipefail
MIXTRAIN="${1:-build/mixtrain}"
STEPS="${2:-30}"
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
B=8
T=256
RUN=(train --model gpt-mini --precision bf16-mixed --batch-size "$B" --seq-len "$T" --steps "$STEPS" --json)
get() { python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], float('nan')))" "$1" "$2"; }

OMP_NUM_THREADS=2 "$MIXTRAIN" "${RUN[@]}" --grad-accum 2 --threads 2 >"$OUT/one2.json"
OMP_NUM_THREADS=1 "$MIXTRAIN" "${RUN[@]}" --threads 1 >"$OUT/one1.json"
MPI=(mpirun -np 2 --bind-to core -x OMP_NUM_THREADS=1)
"${MPI[@]}" "$MIXTRAIN" "${RUN[@]}" --threads 1 >"$OUT/two_fp32.json"
"${MPI[@]}" "$MIXTRAIN" "${RUN[@]}" --threads 1 --bucket-mb 100000 >"$OUT/two_nooverlap.json"
"${MPI[@]}" "$MIXTRAIN" "${RUN[@]}" --threads 1 --grad-reduce-dtype bf16 >"$OUT/two_bf16.json"

base=$(get "$OUT/one2.json" tokens_per_s)
printf '%-44s %10s %8s %10s %14s %12s\n' run tokens/s ratio overlapped window_ms/step wait_ms/step
for r in one2 one1 two_fp32 two_nooverlap two_bf16; do
  tps=$(get "$OUT/$r.json" tokens_per_s)
  python3 -c "
import json, sys
s = json.load(open('$OUT/$r.json'))
names = {'one2': '1 process x 2 threads, --grad-accum 2', 'one1': '1 process x 1 thread (one rank)',
         'two_fp32': '2 ranks x 1 thread, fp32 sums, overlap', 'two_nooverlap': '2 ranks x 1 thread, fp32, one bucket',
         'two_bf16': '2 ranks x 1 thread, bf16 sums, overlap'}
print('%-44s %10.0f %8.3f %10s %14.3f %12.3f' % (names['$r'], s['tokens_per_s'], s['tokens_per_s'] / $base,
      '%.0f%%' % (100 * s['buckets_overlapped']) if 'ranks' in s else '-',
      1e3 * s.get('reduce_overlap_s_per_step', 0), 1e3 * s.get('reduce_wait_s_per_step', 0)))"
done
echo
python3 "$HERE/scaling_model.py" --check-two-rank "$OUT/one1.json" "$OUT/two_fp32.json" --tokens-per-step $((B * T)) --gbps 40
