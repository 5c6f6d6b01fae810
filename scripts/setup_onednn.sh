#!/usr/bin/env bash
# Installs oneDNN 3.2 into deps/onednn/ (gitignored) from its PyPI wheels, the build the project
# links by default (CMakeLists.txt; -DMIXTRAIN_SYSTEM_ONEDNN=ON links Debian's 2.6.3 instead):
#   onednn-cpu-gomp 2023.2.0        lib/libdnnl.so.3.2 (built against GNU OpenMP, no other runtime)
#   onednn-devel-cpu-gomp 2023.2.0  include/ (the C and C++ API), lib/cmake/dnnl/ (the CMake package)
# Why not Debian's: Debian 12 has oneDNN 2.6.3, which has no fp16 matmul, ignores the fpmath mode
# (fp32 GEMMs on the bf16 units) and runs bf16 on AMX up to 2.3x slower at the model's shapes
# (bench/RESULTS.md, issue 32). The newer wheels on PyPI need TBB and the SYCL runtime; these two
# need only libgomp and libstdc++, which the toolchain brings.
# Run by scripts/setup.sh; idempotent (a stamp holds the wheels' sums); offline once cached
# ($MIXTRAIN_CACHE/pypi, as setup_data.sh).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cache="${MIXTRAIN_CACHE:-${XDG_CACHE_HOME:-${HOME:-$repo}/.cache}/mixtrain}"
python="${PYTHON:-python3}"
dest="$repo/deps/onednn"

LIB_WHEEL=onednn_cpu_gomp-2023.2.0-py2.py3-none-manylinux1_x86_64.whl
LIB_WHEEL_SHA=2f22a54d6a890ed14bfa185d42a4be65d8b5b1df85dc1f0f3a9abe31620416fb
DEV_WHEEL=onednn_devel_cpu_gomp-2023.2.0-py2.py3-none-manylinux1_x86_64.whl
DEV_WHEEL_SHA=9763c69e8c907e119056bd52ad918ca84ac9ba939d130a99dfa95ccca3e5e284

say() { echo "setup_onednn: $*"; }
die() { echo "setup_onednn: $*" >&2; exit 1; }
# shellcheck source=scripts/pypi_wheels.sh
source "$repo/scripts/pypi_wheels.sh"

stamp="$LIB_WHEEL_SHA $DEV_WHEEL_SHA"
if [ -f "$dest/.wheels" ] && [ "$(cat "$dest/.wheels")" = "$stamp" ] && [ -f "$dest/lib/libdnnl.so.3.2" ] &&
  [ -f "$dest/lib/cmake/dnnl/dnnl-config.cmake" ] && [ -f "$dest/include/oneapi/dnnl/dnnl.hpp" ]; then
  say "$dest is up to date (oneDNN 3.2.0)"
  exit 0
fi
lib="$(wheel "$LIB_WHEEL" "$LIB_WHEEL_SHA" onednn-cpu-gomp==2023.2.0)"
dev="$(wheel "$DEV_WHEEL" "$DEV_WHEEL_SHA" onednn-devel-cpu-gomp==2023.2.0)"
tmp="$dest.tmp"
rm -rf "$tmp"
mkdir -p "$tmp"
# The wheels' data/ trees, with the library's three identical copies (zip has no links) made one
# file and two links, as an install of oneDNN has them.
"$python" - "$tmp" "$lib" "$dev" <<'PY'
import os, sys, zipfile
dest = sys.argv[1]
for whl in sys.argv[2:]:
    with zipfile.ZipFile(whl) as z:
        for n in z.namelist():
            if ".data/data/" not in n or n.endswith("/"):
                continue
            rel = n.split(".data/data/", 1)[1]
            if rel in ("lib/libdnnl.so", "lib/libdnnl.so.3"):
                continue
            path = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with z.open(n) as src, open(path, "wb") as out:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
os.symlink("libdnnl.so.3.2", os.path.join(dest, "lib", "libdnnl.so.3"))
os.symlink("libdnnl.so.3", os.path.join(dest, "lib", "libdnnl.so"))
PY
[ -f "$tmp/lib/libdnnl.so.3.2" ] && [ -f "$tmp/lib/cmake/dnnl/dnnl-config.cmake" ] ||
  die "the wheels did not hold lib/libdnnl.so.3.2 and lib/cmake/dnnl/dnnl-config.cmake"
echo "$stamp" > "$tmp/.wheels"
rm -rf "$dest"
mv "$tmp" "$dest"
say "wrote $dest (oneDNN 3.2.0)"
