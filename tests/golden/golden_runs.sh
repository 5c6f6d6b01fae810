# The runs whose step logs are kept bit for bit in tests/golden/trajectories/*.jsonl, one file per
# machine it was recorded on (its first line the machine's fingerprint: tests/golden/golden.py; sourced by
# tests/cli/golden_trajectories_test.sh, which compares, and tools/make_golden_trajectories.sh,
# which records). gpt-nano on the built-in corpus, 20 steps, 2 threads, in every precision mode
# with and without activation checkpointing, with two injected non-finite gradients (steps 7 and
# 13: the skip path, and the scaler's back-off in 16-mixed), plus SGD and the 16-bit update
# roundings. (16-true with nearest rounding diverges at step 4 at this learning rate, as pure fp16
# AdamW does: its NaN steps are part of the record.) Each line: a run name, then its `train` options.
GOLDEN_RUNS=(
  "32-true          --precision 32-true"
  "32-true-ckpt     --precision 32-true --checkpoint-activations"
  "16-mixed         --precision 16-mixed"
  "16-mixed-ckpt    --precision 16-mixed --checkpoint-activations"
  "bf16-mixed       --precision bf16-mixed"
  "bf16-mixed-ckpt  --precision bf16-mixed --checkpoint-activations"
  "16-true          --precision 16-true"
  "16-true-ckpt     --precision 16-true --checkpoint-activations"
  "16-true-sr       --precision 16-true --update-rounding stochastic"
  "16-true-kahan    --precision 16-true --update-rounding kahan --checkpoint-activations"
  "bf16-true        --precision bf16-true"
  "bf16-true-ckpt   --precision bf16-true --checkpoint-activations"
  "bf16-true-kahan  --precision bf16-true --update-rounding kahan"
  "bf16-true-sgd-sr --precision bf16-true --optimizer sgd --update-rounding stochastic"
  "16-mixed-sgd     --precision 16-mixed --optimizer sgd --grad-accum 2"
)
GOLDEN_COMMON=(--threads 2 train --model gpt-nano --steps 20 --batch-size 4 --seq-len 64 --lr 3e-3
               --warmup 3 --inject-nonfinite 7,13 --eval-batches 2 --json)

# golden_record BINARY OUT: runs every golden run and writes one JSON line per step to OUT:
# {"run", "step", "loss", "grad_norm", "loss_scale", "skipped", "found_inf", "overflows", "lr",
#  "val_loss"?} (the timing fields left out).
golden_record() {
  local bin="$1" out="$2" tmp
  tmp="$(mktemp -d)"
  : >"$out"
  for line in "${GOLDEN_RUNS[@]}"; do
    # shellcheck disable=SC2086
    set -- $line
    local name="$1"
    shift
    # Exit 3 (diverged: 16-true's weights end non-finite) is a result too: its log is recorded.
    local rc=0
    "$bin" "${GOLDEN_COMMON[@]}" "$@" --log-jsonl "$tmp/$name.jsonl" >"$tmp/$name.out" 2>&1 || rc=$?
    if [ "$rc" != 0 ] && [ "$rc" != 3 ]; then
      echo "golden run $name failed (exit $rc): $(tail -n 3 "$tmp/$name.out")" >&2
      rm -rf "$tmp"
      return 1
    fi
    python3 - "$name" "$tmp/$name.jsonl" >>"$out" <<'PY'
import json, sys
keep = ("step", "loss", "grad_norm", "loss_scale", "skipped", "found_inf", "overflows", "lr", "val_loss")
for l in open(sys.argv[2]):
    j = json.loads(l)
    r = {"run": sys.argv[1]}
    r.update({k: j[k] for k in keep if k in j})
    print(json.dumps(r))
PY
  done
  rm -rf "$tmp"
}

# golden_fingerprint BINARY OUT: this machine's fingerprint (tests/golden/golden.py) as JSON in OUT.
golden_fingerprint() {
  local bin="$1" out="$2" info
  info="$(mktemp)"
  "$bin" --threads 2 info --json >"$info" || { echo "mixtrain info --json failed" >&2; rm -f "$info"; return 1; }
  python3 "$(dirname "${BASH_SOURCE[0]}")/golden.py" fingerprint "$info" >"$out"
  local rc=$?
  rm -f "$info"
  return $rc
}
