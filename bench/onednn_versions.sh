#!/usr/bin/env bash
# oneDNN 2.6.3 (Debian's) against 3.2 (deps/onednn, scripts/setup_onednn.sh) side by side: compiles
# bench/onednn_probe.cpp against each (outside the CMake build: one program per library) and runs
# them in alternating rounds, printing per shape and dtype the median GF/s and the range.
# Usage: bench/onednn_versions.sh [ROUNDS] (default 3); OMP_NUM_THREADS defaults to 2.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
g++ -O2 -std=c++17 -fopenmp bench/onednn_probe.cpp -o "$out/probe26" -ldnnl
g++ -O2 -std=c++17 -fopenmp -Ideps/onednn/include bench/onednn_probe.cpp -o "$out/probe32" \
  -Ldeps/onednn/lib -Wl,-rpath,"$(pwd)/deps/onednn/lib" -ldnnl
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
for r in $(seq "$rounds"); do
  echo "== 2.6"; "$out/probe26"
  echo "== 3.2"; "$out/probe32"
done > "$out/all.txt"
python3 - "$out/all.txt" <<'PY'
import collections, re, statistics, sys
d, impl, v = collections.defaultdict(list), {}, None
for line in open(sys.argv[1]):
    if line.startswith("=="):
        v = line.split()[1]
        continue
    m = re.match(r"(\d+ \d+ \d+) (\S+) (\d+) GF/s (\S+)", line)
    if m:
        d[(m[1], m[2], v)].append(int(m[3]))
        impl[(m[2], v)] = m[4]
kinds = ["f32", "f32+fpmath_bf16", "bf16", "bf16-anyB", "f16", "f16-anyB"]
print("| M N K | " + " | ".join(f"{k} {v}" for k in kinds for v in ("2.6", "3.2")) + " |")
print("|---" * (1 + 2 * len(kinds)) + "|")
for s in sorted({k[0] for k in d}):
    cells = []
    for k in kinds:
        for v in ("2.6", "3.2"):
            x = d.get((s, k, v))
            cells.append(f"{statistics.median(x):.0f} ({min(x)}-{max(x)})" if x else "-")
    print(f"| {s} | " + " | ".join(cells) + " |")
print("implementations: " + ", ".join(f"{k} {v}: {i}" for (k, v), i in sorted(impl.items())))
PY
