#!/usr/bin/env bash
# The installed package works for a project outside the tree: installs this build into a
# temporary prefix (cmake --install), configures tests/consumer/ against it with
# find_package(mixtrain), builds it and runs it. Usage: consumer_test.sh SOURCE_DIR BUILD_DIR
src="${1:?usage: consumer_test.sh SOURCE_DIR BUILD_DIR}"
build="${2:?usage: consumer_test.sh SOURCE_DIR BUILD_DIR}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
step() {  # step NAME COMMAND...: runs it quietly, shows its output on failure
  if ! "${@:2}" >"$tmp/$1.log" 2>&1; then
    echo "FAIL: $1: $(tail -n 20 "$tmp/$1.log")"
    echo "0 passed, 1 failed"
    exit 1
  fi
}
step install cmake --install "$build" --prefix "$tmp/prefix"
for f in include/mixtrain/mixtrain.h lib/cmake/mixtrain/mixtrainConfig.cmake bin/mixtrain share/mixtrain/fortunes.txt; do
  [ -e "$tmp/prefix/$f" ] || { echo "FAIL: the install lacks $f"; echo "0 passed, 1 failed"; exit 1; }
done
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
step configure cmake -S "$src/tests/consumer" -B "$tmp/consumer" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$tmp/prefix"
step build cmake --build "$tmp/consumer" -j 2
step run "$tmp/consumer/consumer"
cat "$tmp/run.log"
# The installed CLI finds its corpus under PREFIX/share/mixtrain.
step cli env -u MIXTRAIN_DATA_DIR "$tmp/prefix/bin/mixtrain" --threads 2 train --model gpt-nano --steps 2 --batch-size 2 --seq-len 32 --json
echo "1 passed, 0 failed"
