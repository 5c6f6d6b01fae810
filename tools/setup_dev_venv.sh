#!/usr/bin/env bash
# Creates (or updates) the Python venv for mixtrain's development tools, e.g.
# tools/make_gpt_fixture.py, and installs tools/requirements-dev.txt into it. Development only:
# no build, test or CI step runs this. Idempotent: an up-to-date venv is left untouched.
#   MIXTRAIN_DEV_VENV  where the venv lives (default: .venv-dev in the repo root, gitignored)
#   PYTHON             the interpreter that creates it (default: python3)
# Note: torch from PyPI on Linux x86_64 brings its CUDA libraries (several GB); the fixture
# script itself runs on the CPU.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${MIXTRAIN_DEV_VENV:-$repo/.venv-dev}"
req="$repo/tools/requirements-dev.txt"
python="${PYTHON:-python3}"
stamp="$venv/.mixtrain-requirements.sha256"

if [ ! -x "$venv/bin/python" ]; then
  echo "setup_dev_venv: creating $venv"
  "$python" -m venv "$venv" || {
    echo "setup_dev_venv: '$python -m venv' failed (on Debian: apt-get install python3-venv)" >&2
    exit 2
  }
fi

want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
   "$venv/bin/python" -c 'import torch, numpy, safetensors, tokenizers, transformers' 2>/dev/null; then
  echo "setup_dev_venv: $venv is up to date"
  exit 0
fi

"$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$req"
echo "$want" > "$stamp"
echo "setup_dev_venv: ready: $venv/bin/python tools/make_gpt_fixture.py"
