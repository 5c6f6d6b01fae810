# Helpers for the CLI tests (sourced). $MIXTRAIN is the binary under test.
set -u
FAILS=0
PASSES=0
TMP="$(mktemp -d)"
CLI_TESTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"  # this folder
trap 'rm -rf "$TMP"' EXIT

fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
# crash_detail STDERR_FILE: what a crashed run said, whole, and its backtrace (the "mixtrain: fatal:"
# line of crash_report.cpp) as functions and lines of this build, for the CI log.
crash_detail() {
  cat "$1"
  local offsets
  offsets=$(sed -n 's/^mixtrain: fatal: .*(addr2line [^)]*)://p' "$1" | tr ' ' '\n' | grep '^0x' | tr '\n' ' ')
  [ -n "$offsets" ] && command -v addr2line >/dev/null && addr2line -e "$MIXTRAIN" -f -C -i -p $offsets
}

# The tests' inputs: a small text (~40 KB) and a tiny GPT config (2 heads) so a run takes seconds.
write_text() { for i in $(seq 1 400); do echo "line $i: the quick brown fox jumps over the lazy dog; pack my box."; done >"$1"; }
# write_tiny_model FILE LAYERS EMBD BLOCK
# write_tiny_encoder_task SRC DIR: a fine-tune task for the encoder fixture's bert_tiny (vocab 99,
# 24 positions, 3 labels): DIR/model (its config and weights, a generated vocab.txt of 99 tokens)
# and DIR/train.tsv (96 rows), DIR/test.tsv (40): "the food was <sentiment> and it tasted wN ..."
# labelled negative / neutral / positive by the sentiment word.
write_tiny_encoder_task() {
  local src="$1" dir="$2" m="$2/model"
  mkdir -p "$m"
  cp "$src/tests/fixtures/encoder/bert_tiny/config.json" "$src/tests/fixtures/encoder/bert_tiny/model.safetensors" "$m/"
  {
    printf '%s\n' "[PAD]" "[UNK]" "[CLS]" "[SEP]" "[MASK]" good bad meh the food was and it tasted
    for i in $(seq 1 85); do echo "w$i"; done
  } >"$m/vocab.txt"
  local f name rows offset i words=(bad meh good good) labels=(negative neutral positive positive)
  for f in train:96:0 test:40:1; do
    IFS=: read -r name rows offset <<<"$f"
    echo -e "text\tlabel" >"$dir/$name.tsv"
    for i in $(seq 1 "$rows"); do
      local k=$(((i + offset) % 4))
      echo -e "the food was ${words[$k]} and it tasted w$(((i * 7) % 85 + 1)) w$(((i * 3) % 85 + 1))\t${labels[$k]}"
    done >>"$dir/$name.tsv"
  done
}
# same_log A B: two JSONL logs (step logs, numerics records) agree line for line in every field but
# the timings (tokens_per_s, elapsed_s), floats compared exactly; prints the first difference.
same_log() {
  python3 - "$1" "$2" <<'PY'
import json, sys
def load(p):
    out = []
    for line in open(p):
        j = json.loads(line)
        for k in ("tokens_per_s", "elapsed_s"):
            j.pop(k, None)
        out.append(j)
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
if a != b:
    for x, y in zip(a, b):
        if x != y:
            print("first difference:", x, y)
            break
    print("lengths", len(a), len(b))
    sys.exit(1)
PY
}
# same_tensors A B: every tensor of two safetensors files: same names, dtypes, shapes and bytes.
same_tensors() { python3 - "$1" "$2" <<'PY'
import json, struct, sys
def load(p):
    d = open(p, "rb").read()
    (n,) = struct.unpack("<Q", d[:8])
    h = json.loads(d[8:8 + n]); body = d[8 + n:]
    return {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in h.items() if k != "__metadata__"}
a, b = load(sys.argv[1]), load(sys.argv[2])
if set(a) != set(b): sys.exit(f"tensor names differ: {sorted(set(a) ^ set(b))}")
bad = [k for k in a if a[k] != b[k]]
if bad: sys.exit(f"{len(bad)} of {len(a)} tensors differ, e.g. {bad[:3]}")
PY
}
# ALL_MODES: the five precision modes, for the loops that check every one (the MPI tests: 2 ranks
# against ZeRO, one process, another stage). In the sanitizer build (MIXTRAIN_SANITIZED=1, set by
# tests/CMakeLists.txt) a cover of their code paths instead: fp32 throughout (whose runs the mpi
# and finetune_mpi tests compare others with), fp16 autocast with the loss scaler and fp32 masters,
# bf16 parameters with bf16 gradients and no masters. bf16-mixed and 16-true run the same code with
# another 16-bit type; the Release run checks all five, bit for bit. Under ASan each 2-rank run
# costs ~5x (the MPI tests were 11 of the sanitizer run's 12 minutes on 2 cores).
ALL_MODES="32-true 16-mixed bf16-mixed 16-true bf16-true"
if [ "${MIXTRAIN_SANITIZED:-0}" = "1" ]; then
  ALL_MODES="32-true 16-mixed bf16-true"
  echo "sanitizer build: precision-mode loops over $ALL_MODES (the Release run: all five)"
fi
# use_mpirun: the set-up of the tests that run ranks under OpenMPI's mpirun (scripts/setup.sh
# installs it; without mpirun the test fails, it does not skip). Root: OpenMPI refuses to run as
# root without OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM), set here; one thread per rank. Sets MPIRUN: 2 ranks
# on this machine. The sanitizer build (scripts/test.sh sets ASAN_OPTIONS with detect_leaks=1):
# OpenMPI keeps some of its own allocations past MPI_Finalize. Its components stay loaded (no
# dlclose) so their frames can be named, the slow unwinder walks through its frame-pointer-less
# code, and only leaks inside OpenMPI's libraries are suppressed (lsan_openmpi.supp). That costs
# ~2 s a 2-rank run (measured under ASan: 3.5 s against 1.4 s; the slow unwinder on every malloc
# and the exit scan of OpenMPI's ~3300 blocks), most of the MPI tests' time: so the ranks look for
# leaks in the runs of the feature a test is about (MPIRUN_LEAKS: each mode's 2-rank run, ZeRO
# stage N's run), not in the runs they are compared with (MPIRUN) or in other launches prefixed
# with "${MPI_NO_LEAKS[@]}". Outside the sanitizer build all three are plain mpirun.
use_mpirun() {
  if ! command -v mpirun >/dev/null; then
    echo "FAIL: mpirun not found: install openmpi-bin and libopenmpi-dev (scripts/setup.sh)"
    exit 1
  fi
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
  export OMPI_MCA_mca_base_component_disable_dlclose=1 PMIX_MCA_mca_base_component_disable_dlclose=1
  export LSAN_OPTIONS="suppressions=$CLI_TESTS/lsan_openmpi.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
  MPIRUN=(mpirun -np 2 --oversubscribe --bind-to none)
  MPIRUN_LEAKS=("${MPIRUN[@]}")
  MPI_NO_LEAKS=()
  if [ -n "${ASAN_OPTIONS:-}" ]; then
    MPI_NO_LEAKS=(env "ASAN_OPTIONS=$ASAN_OPTIONS:detect_leaks=0")
    MPIRUN_LEAKS=(env "ASAN_OPTIONS=$ASAN_OPTIONS:fast_unwind_on_malloc=0" "${MPIRUN[@]}")
    MPIRUN=("${MPI_NO_LEAKS[@]}" "${MPIRUN[@]}")
  fi
}
# compare_under_mpirun DIR FIELDS N -- ARGS...: `mixtrain ARGS` (a compare) on 2 ranks prints one
# table, and its JSON rows hold, mode for mode, the FIELDS (comma-separated) of one process's run
# with --grad-accum 2 --exact-grad-accum; N rows.
compare_under_mpirun() {
  local d="$1" fields="$2" rows="$3"
  shift 4
  mkdir -p "$d"
  if timeout 120 "${MPIRUN[@]}" "$MIXTRAIN" "$@" --json "$d/two.json" >"$d/out" 2>"$d/err" &&
     "$MIXTRAIN" "$@" --grad-accum 2 --exact-grad-accum --json "$d/one.json" >/dev/null 2>"$d/err1"; then
    [ "$(grep -c '^precision ' "$d/out")" = 1 ] && pass || fail "compare under mpirun: not one table: $(head -c 400 "$d/out")"
    python3 - "$d/two.json" "$d/one.json" "$fields" "$rows" <<'PY' && pass || fail "compare under mpirun differs from one process"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
keys = ["precision"] + sys.argv[3].split(",")
got = [tuple(r[k] for k in keys) for r in a["runs"]]
want = [tuple(r[k] for k in keys) for r in b["runs"]]
assert len(got) == int(sys.argv[4]) and got == want, (got, want)
PY
  else
    fail "compare under mpirun: $(tail -c 400 "$d/err" "$d/err1" 2>/dev/null)"
  fi
}
write_tiny_model() { echo "{\"n_layer\": $2, \"n_head\": 2, \"n_embd\": $3, \"block_size\": $4}" >"$1"; }
pass() { PASSES=$((PASSES + 1)); }
# same_checkpoint A B WHAT: the checkpoint step directories A and B hold the same model and
# train_state tensors byte for byte (same_tensors); WHAT names the pair in failures.
same_checkpoint() {
  local f msg
  for f in model train_state; do
    if msg=$(same_tensors "$1/$f.safetensors" "$2/$f.safetensors" 2>&1); then pass; else
      fail "$3: $f.safetensors differs: $msg"
    fi
  done
}
# resume_on_trajectory DIR REFLOG WHAT HOW -- COMMAND...: COMMAND (a train run, 16-mixed) resumes
# DIR/ck/step-000003 to step 6, logging after DIR/first.jsonl into DIR/HOW.jsonl, which must be
# the uninterrupted run's REFLOG (same_log). WHAT names the checkpoint's kind in failures.
resume_on_trajectory() {
  local d="$1" ref="$2" what="$3" how="$4" msg
  shift 5
  cp "$d/first.jsonl" "$d/$how.jsonl"
  if ! "$@" --steps 6 --precision 16-mixed --resume "$d/ck/step-000003" --log-jsonl "$d/$how.jsonl" \
      >/dev/null 2>"$d/err"; then
    fail "resume of a $what checkpoint ($how) failed: $(tail -c 400 "$d/err")"
    return
  fi
  if msg=$(same_log "$d/$how.jsonl" "$ref"); then pass; else
    fail "$what checkpoint resumed ($how) left the uninterrupted trajectory: $msg"
  fi
}

# rank1_injection_skips WHAT [FLAGS...]: a non-finite gradient on rank 1 only, at step 3 (16-mixed,
# initial scale 1024, 2 ranks of COMMON under MPIRUN): both ranks skip it and continue at 512
# (--verify-replicas after every step).
rank1_injection_skips() {
  local what="$1" d="$TMP/inject_$(echo "$*" | tr -c 'a-z0-9' _)" got
  shift
  mkdir -p "$d"
  if timeout 60 "${MPIRUN[@]}" "$MIXTRAIN" train "${COMMON[@]}" "$@" --steps 5 --precision 16-mixed --init-scale 1024 \
      --inject-nonfinite 3 --inject-nonfinite-rank 1 --verify-replicas --log-jsonl "$d/log.jsonl" >/dev/null 2>"$d/err"; then
    got=$(python3 -c "
import json
for l in open('$d/log.jsonl'):
    j = json.loads(l)
    print(j['step'], j['skipped'], j['loss_scale'])" | tr '\n' ';')
    local want="1 False 1024.0;2 False 1024.0;3 True 1024.0;4 False 512.0;5 False 512.0;"
    if [ "$got" = "$want" ]; then pass; else fail "$what: (step skipped scale) $got, expected $want"; fi
  else
    fail "$what: the run failed: $(tail -c 400 "$d/err")"
  fi
}
# expect_exit CODE DESCRIPTION -- command...: runs the command, checks its exit code, and for
# errors (code 2/3) that stderr is exactly one line starting with "mixtrain: error:".
expect_exit() {
  local want="$1" what="$2"
  shift 3
  "$@" >"$TMP/out" 2>"$TMP/err"
  local got=$?
  if [ "$got" != "$want" ]; then
    fail "$what: exit $got, expected $want; stderr: $(head -c 300 "$TMP/err")"
    return
  fi
  if [ "$want" != 0 ]; then
    local lines
    lines=$(wc -l <"$TMP/err")
    if [ "$lines" != 1 ] || ! grep -q '^mixtrain: error: ' "$TMP/err"; then
      fail "$what: stderr is not one 'mixtrain: error:' line: $(head -c 300 "$TMP/err")"
      return
    fi
  fi
  pass
}

# expect_stderr_has TEXT DESCRIPTION: the last command's stderr mentions TEXT.
# expect_mpi_error WHAT PATTERN -- COMMAND...: a run under mpirun (COMMAND brings its own timeout)
# refused: a non-zero exit that is not the timeout's, and a rank's one-line error matching
# "^mixtrain: error: PATTERN" (grep's basic regex) on stderr. Two checks.
expect_mpi_error() {
  local what="$1" pattern="$2"
  shift 3
  "$@" >/dev/null 2>"$TMP/err"
  local code=$?
  [ "$code" != 0 ] && [ "$code" != 124 ] && pass || fail "$what: exit $code"
  grep -q "^mixtrain: error: $pattern" "$TMP/err" && pass || fail "$what: no one-line error: $(head -c 300 "$TMP/err")"
}

expect_stderr_has() {
  if grep -qF -- "$1" "$TMP/err"; then pass; else fail "$2: stderr lacks '$1': $(head -c 300 "$TMP/err")"; fi
}

finish() {
  echo "$PASSES passed, $FAILS failed"
  [ "$FAILS" = 0 ]
}
