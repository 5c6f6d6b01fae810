#!/usr/bin/env bash
# The layers only point down: a file may include its own layer and the layers below it, never one
# above. The order, bottom first (README's "What is here" table follows it):
#
#   core        errors, CPU features, the profiler
#   numeric     fp16, bf16, fp8, rounding, bulk conversions
#   tensor      Tensor, storage, allocator, memory accounting, the meta device
#   data        the text corpus, batches (needs only tensor)
#   kernels     every compute loop behind the backend
#   dist        the ranks of a data-parallel run and their collectives (MPI under mpirun)
#   autograd    the recorded graph; a cast hook (autograd/cast_hook.h) that amp fills in
#   amp         precision modes, autocast (installs the hook), GradScaler
#   nn          the parameter arena, layers
#   optim       optimizers, clipping, schedules, MixedPrecision (the step discipline)
#   models      Model, Gpt
#   checkpoint  safetensors, GPT-2 weights, the training-state file
#   train       TrainingRun, train(), checkpointing of a run, memory prediction, TensorBoard event files
#   report      the HTML report of runs and comparisons (reads what train writes)
#   cli         apps/ (the command-line program: a client of the public headers, include/mixtrain,
#               and of its own files; an include that resolves to src/ fails)
#
# Every #include of src/, include/mixtrain/ and apps/ is resolved as the compiler does: a quoted
# name first against the including file's folder, then against include/ and src/ (so
# "mixtrain/amp/autocast.h" is amp, "kernels/cpu/cpu_ops.h" is a private kernels header);
# system headers are left alone. An include of a higher layer fails, naming the file, the line
# and both layers; so does a folder that is not in the order above. The umbrella header
# include/mixtrain/mixtrain.h counts as train (it includes the public headers of every layer).
# Last, no two files of the tree include each other (tests/source/include_cycles.py).
# Usage: layering_test.sh SOURCE_DIR
src="${1:?usage: layering_test.sh SOURCE_DIR}"
cd "$src" || exit 2
order="core numeric tensor data kernels dist autograd amp nn optim models checkpoint train report cli"
passed=0
failed=0
pass() { passed=$((passed + 1)); }
fail() {
  echo "FAIL: $1"
  failed=$((failed + 1))
}

for d in src include/mixtrain apps; do
  [ -d "$d" ] || { echo "FAIL: $d is missing (update $0)"; echo "0 passed, 1 failed"; exit 1; }
done

# check FILE_LIST: reads `grep -n` lines (path:line:text) on stdin, prints one line per upward
# include or unknown layer; FILE_LIST holds every existing file, one path a line.
check() {
  awk -v order="$order" -v files="$1" '
    BEGIN {
      n = split(order, names, " ")
      for (i = 1; i <= n; ++i) rank[names[i]] = i
      while ((getline f < files) > 0) exists[f] = 1
    }
    # a/b/../c/./d -> a/c/d
    function normalize(p,   parts, k, i, out, m) {
      k = split(p, parts, "/")
      m = 0
      for (i = 1; i <= k; ++i) {
        if (parts[i] == "" || parts[i] == ".") continue
        if (parts[i] == ".." && m > 0) { --m; continue }
        out[++m] = parts[i]
      }
      p = ""
      for (i = 1; i <= m; ++i) p = p (i > 1 ? "/" : "") out[i]
      return p
    }
    function layer_of(path,   parts) {
      split(path, parts, "/")
      if (parts[1] == "apps") return "cli"
      if (parts[1] == "src") return parts[2]
      if (parts[1] == "include" && parts[2] == "mixtrain" && parts[3] == "mixtrain.h") return "train"  # the umbrella
      if (parts[1] == "include" && parts[2] == "mixtrain") return parts[3]
      return ""
    }
    {
      file = $0; sub(/:.*/, "", file)
      rest = substr($0, length(file) + 2)
      line = rest; sub(/:.*/, "", line)
      text = substr(rest, length(line) + 2)
      if (!match(text, /^[ \t]*#[ \t]*include[ \t]*[<"][^>"]+[>"]/)) next
      inc = substr(text, RSTART, RLENGTH)
      quoted = index(inc, "\"") > 0
      sub(/^[^<"]*[<"]/, "", inc); sub(/[>"]$/, "", inc)

      from = layer_of(file)
      if (!(from in rank)) { print file ":" line ": its folder is not a layer (" from "); add it to the order in the test"; next }
      dir = file; sub(/\/[^\/]*$/, "", dir)
      to = ""; res = ""
      if (quoted && (normalize(dir "/" inc) in exists)) res = normalize(dir "/" inc)
      else if (("include/" inc) in exists) res = "include/" inc
      else if (("src/" inc) in exists) res = "src/" inc
      if (res != "") {
        to = layer_of(res)
        if (from == "cli" && substr(res, 1, 4) == "src/") {
          print file ":" line ": the CLI includes the private header " res " (apps/ uses only include/mixtrain)"
          next
        }
      } else {
        # Not found (a header being added, or the self-check below): judge by the name.
        split(inc, parts, "/")
        if (parts[1] == "mixtrain" && parts[3] != "") to = parts[2]
        else if (quoted && (parts[1] in rank) && parts[2] != "") to = parts[1]
        else next  # a system or third-party header
      }
      if (!(to in rank)) { print file ":" line ": includes " inc " from an unknown layer (" to ")"; next }
      if (rank[to] > rank[from])
        print file ":" line ": " from " includes " to " (" inc "), a higher layer"
    }'
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
find src include apps -type f >"$tmp/files"

# 1. The tree.
found=$(grep -rnE '^[[:space:]]*#[[:space:]]*include' src include/mixtrain apps --include='*.cpp' --include='*.h' |
  check "$tmp/files")
if [ -n "$found" ]; then
  fail "upward includes (move the code down, or invert the dependency through a hook):"
  echo "$found"
else
  pass
fi

# 2. The check sees a violation: public, private (resolved against src/) and relative forms.
: >"$tmp/none"
echo "src/train/run_state.h" >"$tmp/sample_files"
sample='src/autograd/functions.cpp:7:#include "mixtrain/amp/autocast.h"
include/mixtrain/amp/grad_scaler.h:39:#include "mixtrain/nn/parameters.h"
src/nn/layers.cpp:3:#include "optim/optim_util.h"
src/kernels/x.cpp:4:  #  include <mixtrain/train/trainer.h>
src/nn/x.cpp:5:#include "../train/run_state.h"'
got=$(echo "$sample" | check "$tmp/sample_files")
if [ "$(echo "$got" | grep -c 'a higher layer')" = 5 ] &&
  echo "$got" | grep -qF 'src/autograd/functions.cpp:7: autograd includes amp'; then
  pass
else
  fail "the check missed a sample violation: got '$got'"
fi

# 2b. The CLI may not include a private header (it is a client of the public API).
echo "src/kernels/backend.h" >"$tmp/private_files"
got=$(echo 'apps/mixtrain/cmd_x.cpp:8:#include "kernels/backend.h"' | check "$tmp/private_files")
if echo "$got" | grep -qF 'the CLI includes the private header src/kernels/backend.h'; then
  pass
else
  fail "the check missed the CLI's private include: got '$got'"
fi

# 3. ... and accepts the same layer, lower layers, relative and system headers, and flags a
# folder outside the order.
sample='src/amp/autocast.cpp:4:#include "mixtrain/amp/autocast.h"
src/amp/autocast.cpp:10:#include "mixtrain/autograd/functions.h"
src/kernels/x.cpp:2:#include "kernels/cpu/cpu_ops.h"
src/autograd/x.cpp:9:#include "internal.h"
apps/mixtrain/x.cpp:1:#include <CLI/CLI.hpp>
src/train/x.cpp:1:#include <vector>'
got=$(echo "$sample" | check "$tmp/none")
got_unknown=$(echo 'src/extra/x.cpp:1:#include "mixtrain/core/error.h"' | check "$tmp/none")
if [ -z "$got" ] && echo "$got_unknown" | grep -qF 'not a layer'; then
  pass
else
  fail "the check flagged an allowed include or missed an unknown folder: got '$got' / '$got_unknown'"
fi

# 4. Within a layer too, no two files include each other (a header and its .cpp count as one):
# tests/source/include_cycles.py; and that check finds a tangled pair in a made-up tree.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if out=$(python3 "$here/include_cycles.py" .); then pass; else fail "files that include each other:"; echo "$out"; fi
if python3 "$here/include_cycles.py" --self-test >/dev/null; then pass; else fail "the include-cycle check's self-test"; fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
