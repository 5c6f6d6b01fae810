#!/usr/bin/env bash
# `mixtrain report` and `compare --report`, checked in a real browser: headless Chromium (Debian's
# chromium, network cut off) loads the report of a 5-mode comparison and dumps the DOM it built;
# every chart must have drawn (non-transparent pixels), the loss chart must hold one training
# series per mode, the loss-scale chart one series per mode, the memory chart one bar per mode,
# the table one row per run of the JSON with its numbers, and the page must have rendered in
# under 2 s without a script error. The report is self-contained (no src/href to anything). The
# same for `mixtrain report` of the comparison's JSON, of step logs and of TensorBoard
# directories; bad inputs are refused with one line and exit 2, writing nothing.
MIXTRAIN="$1"
. "$(dirname "$0")/cli_common.sh"

CHROMIUM="$(command -v chromium || true)"
[ -n "$CHROMIUM" ] || { echo "FAIL: chromium is not installed (scripts/setup.sh installs it)"; exit 1; }

write_text "$TMP/text.txt"
write_tiny_model "$TMP/tiny.json" 1 16 16
COMPARE=("$MIXTRAIN" --threads 1 compare --model "$TMP/tiny.json" --data "$TMP/text.txt" --batch-size 4
  --seq-len 16 --eval-batches 2 --eval-every 3 --steps 8)

# dom HTML OUT: the DOM headless Chromium builds from HTML (no network), in OUT; prints the
# browser's wall time.
dom() {
  local t0 t1
  t0=$(date +%s.%N)
  timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
    --user-data-dir="$TMP/chromium-profile" --host-resolver-rules="MAP * ~NOTFOUND" \
    --virtual-time-budget=5000 --dump-dom "file://$1" >"$2" 2>"$TMP/chromium.err"
  local rc=$?
  t1=$(date +%s.%N)
  [ "$rc" = 0 ] || echo "chromium exit $rc: $(tail -3 "$TMP/chromium.err")" >&2
  python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$t1"
}

# check_dom DOM.html JSON RUNS...: the checks above against the comparison JSON (or, with JSON
# "-", only the labels RUNS); prints what failed.
check_dom() {
  python3 - "$@" <<'PY'
import json, sys
from html.parser import HTMLParser
dom_path, json_path, labels = sys.argv[1], sys.argv[2], sys.argv[3:]
class P(HTMLParser):
    def __init__(self):
        super().__init__(); self.body = {}; self.canvas = {}; self.rows = []; self.cells = None
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body": self.body = a
        if tag == "canvas": self.canvas[a.get("id")] = a
        if tag == "tr" and "data-run" in a: self.rows.append([a["data-run"]]); self.cells = self.rows[-1]
        if tag in ("script", "link", "img", "iframe") and ("src" in a or "href" in a):
            errors.append(f"external reference: <{tag} {a}>")
    def handle_data(self, d):
        if self.cells is not None and self.lasttag == "td": self.cells.append(d)
    def handle_endtag(self, tag):
        if tag == "tr": self.cells = None
errors = []
p = P(); p.feed(open(dom_path, encoding="utf-8").read())
if "data-error" in p.body: errors.append("script error: " + p.body["data-error"])
if p.body.get("data-charts-drawn") != "3": errors.append(f"charts drawn: {p.body.get('data-charts-drawn')}, expected 3")
ms = int(p.body.get("data-render-ms", "99999"))
if ms >= 2000: errors.append(f"rendered in {ms} ms (limit 2000)")
for cid in ("chart-loss", "chart-loss-scale", "chart-memory"):
    c = p.canvas.get(cid)
    if c is None: errors.append(f"no canvas {cid}"); continue
    if int(c.get("data-painted", "0")) < 1000: errors.append(f"{cid}: {c.get('data-painted')} pixels painted")
series = {cid: c.get("data-series", "").split("|") for cid, c in p.canvas.items()}
points = {cid: dict(zip(series[cid], map(int, c.get("data-points", "").split("|")))) if c.get("data-points") else {}
          for cid, c in p.canvas.items()}
if json_path != "-":
    runs = json.load(open(json_path))["runs"]
    labels = [r["precision"] + (":" + r["update_rounding"] if "update_rounding" in r else "") for r in runs]
    if [r[0] for r in p.rows] != labels: errors.append(f"table rows {[r[0] for r in p.rows]} != {labels}")
    for row, r in zip(p.rows, runs):
        want = [row[0], "%.2f" % r["elapsed_s"], "%.0f" % r["tokens_per_s"], "%.1f" % (r["peak_bytes"] / 2**20),
                "%.1f" % (r["peak_rss_bytes"] / 2**20) if r.get("peak_rss_bytes") is not None else "\u2013",
                "%.4f" % r["final_train_loss"] if r["final_train_loss"] is not None else "\u2013",
                "%.4f" % r["val_loss"] if r["val_loss"] is not None else "\u2013",
                str(r["skipped_steps"]), "yes" if r["diverged"] else "no"]
        if row[1:] != want: errors.append(f"row {row[1:]} != JSON {want}")
    cats = sorted({c for r in runs for c in r["peak_bytes_by_category"]})
    for c in cats:
        if points["chart-memory"].get(c) != sum(1 for r in runs if r["peak_bytes_by_category"].get(c)):
            errors.append(f"memory chart: {points['chart-memory'].get(c)} bars of {c}")
    if sorted(series.get("chart-memory", [])) != cats: errors.append(f"memory series {series.get('chart-memory')} != {cats}")
else:
    if [r[0] for r in p.rows] != labels: errors.append(f"table rows {[r[0] for r in p.rows]} != {labels}")
train = [s[:-len(" train")] for s in series.get("chart-loss", []) if s.endswith(" train")]
if train != labels: errors.append(f"loss chart training series {train} != {labels}")
for l in labels:  # every step of every run is a point (the runs here have 8 steps, none diverged)
    for cid, name in (("chart-loss", l + " train"), ("chart-loss-scale", l)):
        if points.get(cid, {}).get(name) != 8: errors.append(f"{cid} {name}: {points.get(cid, {}).get(name)} points, expected 8")
scale = [s for s in series.get("chart-loss-scale", []) if not s.endswith(" skipped")]
if scale != labels: errors.append(f"loss-scale series {scale} != {labels}")
print(f"{dom_path}: {len(p.rows)} rows, series {series.get('chart-loss')}, rendered in {ms} ms")
if errors: print("\n".join(errors)); sys.exit(1)
PY
}

# 1. compare --report: the five modes.
mkdir -p "$TMP/logs"
"${COMPARE[@]}" --json "$TMP/cmp.json" --log-jsonl "$TMP/logs/c.jsonl" --report "$TMP/cmp.html" \
  --tensorboard "$TMP/tb" >"$TMP/cmp.out" 2>&1
grep -q "^report: $TMP/cmp.html" "$TMP/cmp.out" && pass || fail "compare --report: no 'report:' line: $(tail -3 "$TMP/cmp.out")"
if grep -qiE '<(script|link|img)[^>]*(src|href)=' "$TMP/cmp.html"; then fail "the report references other files"; else pass; fi
secs=$(dom "$TMP/cmp.html" "$TMP/cmp.dom")
echo "chromium: ${secs}s for the 5-mode report (browser start included)"
if check_dom "$TMP/cmp.dom" "$TMP/cmp.json"; then pass; else fail "compare --report: the DOM does not match the JSON"; fi

# 2. mixtrain report of the comparison's JSON (curves from the step logs it names).
expect_exit 0 "report of compare --json" -- "$MIXTRAIN" report "$TMP/cmp.json" -o "$TMP/r-json.html"
dom "$TMP/r-json.html" "$TMP/r-json.dom" >/dev/null
if check_dom "$TMP/r-json.dom" "$TMP/cmp.json"; then pass; else fail "report of the JSON: the DOM does not match"; fi

# 3. Of step logs and of a TensorBoard directory of a comparison (one run per subdirectory).
expect_exit 0 "report of step logs" -- "$MIXTRAIN" report "$TMP/logs/c.32-true.jsonl" "$TMP/logs/c.bf16-mixed.jsonl" -o "$TMP/r-logs.html"
dom "$TMP/r-logs.html" "$TMP/r-logs.dom" >/dev/null
if check_dom "$TMP/r-logs.dom" - c.32-true c.bf16-mixed; then pass; else fail "report of step logs"; fi
expect_exit 0 "report of a TensorBoard directory" -- "$MIXTRAIN" report "$TMP/tb" -o "$TMP/r-tb.html"
dom "$TMP/r-tb.html" "$TMP/r-tb.dom" >/dev/null
if check_dom "$TMP/r-tb.dom" - 16-mixed 16-true-nearest 32-true bf16-mixed bf16-true-nearest; then pass; else fail "report of a TensorBoard directory"; fi

# 4. Refusals: one line, exit 2, no output file.
expect_exit 2 "missing input" -- "$MIXTRAIN" report "$TMP/nope.jsonl" -o "$TMP/x.html"
expect_stderr_has "$TMP/nope.jsonl" "missing input"
printf '{"step": 1, "loss": 2.0}\nnot json\n' >"$TMP/bad.jsonl"
expect_exit 2 "malformed step log" -- "$MIXTRAIN" report "$TMP/bad.jsonl" -o "$TMP/x.html"
expect_stderr_has "$TMP/bad.jsonl line 2" "malformed step log"
mkdir -p "$TMP/empty"
expect_exit 2 "directory without event files" -- "$MIXTRAIN" report "$TMP/empty" -o "$TMP/x.html"
[ ! -e "$TMP/x.html" ] && pass || fail "a refused report wrote $TMP/x.html"
expect_exit 2 "output in a missing directory" -- "$MIXTRAIN" report "$TMP/cmp.json" -o "$TMP/no/such/dir/r.html"

# 5. Hostile inputs go through the bounded reader: nesting past 64 levels (a report of it used to
# segfault), duplicate keys, and a step log that is no regular file (a FIFO blocked forever,
# /dev/zero grew without end), also where a compare JSON names it.
python3 -c "print('[' * 100000 + ']' * 100000)" >"$TMP/deep.json"
expect_exit 2 "report of JSON nested 100000 deep" -- timeout 60 "$MIXTRAIN" report "$TMP/deep.json" -o "$TMP/x.html"
expect_stderr_has "nests deeper than 64 levels" "report of JSON nested 100000 deep"
python3 -c "print('{\"step\": 1, \"loss\": 1.0}'); print('{\"step\": 2, \"x\": ' + '[' * 100000 + ']' * 100000 + '}')" >"$TMP/deep.jsonl"
expect_exit 2 "a step-log line nested 100000 deep" -- timeout 60 "$MIXTRAIN" report "$TMP/deep.jsonl" -o "$TMP/x.html"
expect_stderr_has "$TMP/deep.jsonl line 2 nests deeper than 64 levels" "a step-log line nested deep"
printf '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.0, "loss": 3.0}\n' >"$TMP/dup.jsonl"
expect_exit 2 "a step log with a duplicate key" -- "$MIXTRAIN" report "$TMP/dup.jsonl" -o "$TMP/x.html"
expect_stderr_has "line 2 has duplicate key 'loss'" "a step log with a duplicate key"
mkfifo "$TMP/fifo.jsonl"
python3 - "$TMP/cmp.json" "$TMP/cmp-fifo.json" "$TMP/fifo.jsonl" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["runs"][0]["log_jsonl"] = sys.argv[3]
json.dump(j, open(sys.argv[2], "w"))
PY
expect_exit 2 "a compare JSON naming a FIFO as a step log" -- timeout 60 "$MIXTRAIN" report "$TMP/cmp-fifo.json" -o "$TMP/x.html"
expect_stderr_has "not a regular file" "a compare JSON naming a FIFO"
expect_exit 2 "a step log that is /dev/zero" -- timeout 60 "$MIXTRAIN" report /dev/zero -o "$TMP/x.html"
[ ! -e "$TMP/x.html" ] && pass || fail "a refused report wrote $TMP/x.html"

# 6. A corrupt TensorBoard record (a byte flipped mid-file): the records before it are kept, with a
# warning naming the file and the offset (it was dropped silently); --strict refuses the input.
cp -r "$TMP/tb/32-true" "$TMP/tb-bad"
ev="$(ls "$TMP/tb-bad"/events.out.tfevents.* | head -n 1)"
python3 - "$ev" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[len(b) * 3 // 5] ^= 0xFF
open(sys.argv[1], "wb").write(b)
PY
expect_exit 0 "report of a corrupt event file" -- "$MIXTRAIN" report "$TMP/tb-bad" -o "$TMP/bad-tb.html"
expect_stderr_has "mixtrain: warning: event file $ev: the record at byte" "report of a corrupt event file"
expect_stderr_has "records before it kept" "report of a corrupt event file"
rm -f "$TMP/x.html"
expect_exit 2 "report --strict of a corrupt event file" -- "$MIXTRAIN" report --strict "$TMP/tb-bad" -o "$TMP/x.html"
[ ! -e "$TMP/x.html" ] && pass || fail "report --strict wrote a report"

# 7. -o over one of its own inputs, or over a step log a compare JSON names: refused, kept.
cp "$TMP/logs/c.32-true.jsonl" "$TMP/log.orig"
expect_exit 2 "report -o over its step-log input" -- "$MIXTRAIN" report "$TMP/logs/c.32-true.jsonl" -o "$TMP/logs/c.32-true.jsonl"
expect_stderr_has "same file as the report input" "report -o over its step-log input"
expect_exit 2 "report -o over a step log the compare JSON names" -- "$MIXTRAIN" report "$TMP/cmp.json" -o "$TMP/logs/c.32-true.jsonl"
cmp -s "$TMP/logs/c.32-true.jsonl" "$TMP/log.orig" && pass || fail "report -o changed its input"

finish
