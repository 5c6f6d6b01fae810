#!/usr/bin/env bash
# Creates (or updates) the Python venv for mixtrain's development tools, e.g.
# tools/make_gpt_fixture.py, and installs tools/requirements-dev.txt and
# tools/requirements-test.txt into it. With --test only the latter (the readers the test suite
# checks mixtrain's output with, e.g. tensorboard): scripts/test.sh runs that form, so CI has it
# without PyTorch. Idempotent: an up-to-date venv is left untouched.
#   MIXTRAIN_DEV_VENV  where the venv lives (default: .venv-dev in the repo root, gitignored)
#   PYTHON             the interpreter that creates it (default: python3)
# Note: torch from PyPI on Linux x86_64 brings its CUDA libraries (several GB); the fixture
# script itself runs on the CPU.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${MIXTRAIN_DEV_VENV:-$repo/.venv-dev}"
req="$repo/tools/requirements-dev.txt"
python="${PYTHON:-python3}"
only_test=0
if [ "${1:-}" = "--test" ]; then only_test=1; elif [ $# -gt 0 ]; then
  echo "setup_dev_venv: unknown argument '$1' (usage: setup_dev_venv.sh [--test])" >&2
  exit 2
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "setup_dev_venv: creating $venv"
  "$python" -m venv "$venv" || {
    echo "setup_dev_venv: '$python -m venv' failed (on Debian: apt-get install python3-venv)" >&2
    exit 2
  }
fi

# install NAME REQUIREMENTS IMPORTS: pip-installs REQUIREMENTS unless its stamp matches and
# IMPORTS import.
install() {
  local stamp="$venv/.mixtrain-$1.sha256" want
  want="$(sha256sum "$2" | cut -d' ' -f1)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$venv/bin/python" -c "import $3" 2>/dev/null; then
    echo "setup_dev_venv: $1 packages in $venv are up to date"
    return 0
  fi
  "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$2"
  echo "$want" > "$stamp"
}

install test "$repo/tools/requirements-test.txt" tensorboard
if [ "$only_test" = 1 ]; then
  echo "setup_dev_venv: ready (test packages): $venv/bin/python"
  exit 0
fi
install requirements "$req" "torch, numpy, safetensors, tokenizers, transformers"
echo "setup_dev_venv: ready: $venv/bin/python tools/make_gpt_fixture.py"
