#!/usr/bin/env bash
# Records tests/golden/trajectories.jsonl with the built CLI (default build/mixtrain): the step
# logs tests/cli/golden_trajectories_test.sh compares bit for bit. Run it only when a change of
# the numbers is intended, and say why in the commit.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-build/mixtrain}"
export MIXTRAIN_DATA_DIR="${MIXTRAIN_DATA_DIR:-$(pwd)/build/data}"
. tests/golden/golden_runs.sh
golden_record "$bin" tests/golden/trajectories.jsonl
echo "recorded $(wc -l <tests/golden/trajectories.jsonl) steps into tests/golden/trajectories.jsonl"
