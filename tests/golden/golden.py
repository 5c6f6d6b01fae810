#!/usr/bin/env python3
"""The golden step logs' machine fingerprints and their comparison (the runs: golden_runs.sh).

  golden.py fingerprint INFO_JSON          this machine's fingerprint (INFO_JSON: `mixtrain
                                           --threads 2 info --json`), one JSON object on stdout
  golden.py name FINGERPRINT_JSON          a file name for it: vendor-family-model
  golden.py header NAME FINGERPRINT_JSON   the first line of a golden file recorded here
  golden.py find DIR FINGERPRINT_JSON      the golden file in DIR recorded on this machine, or
                                           nothing (exit 1)
  golden.py compare DIR NOW FINGERPRINT_JSON
                                           NOW (step lines, no header) against DIR's golden for
                                           this machine bit for bit; where there is none, against
                                           the nearest one within TOLERANCE (below); says which

A golden file is a header line {"golden": {"machine", "fingerprint", "note"?}} and then one line
per step. The fingerprint is what decides a GEMM's summation order, and so the bits of a step log:
the CPU (vendor, family, model, cache sizes: oneDNN's blocking follows them), the ISA features
mixtrain and oneDNN dispatch on, the oneDNN version and the implementation each GEMM dtype gets.
(The bulk conversions are left out: every path is bit-identical to the scalar one, tested.) Two
machines with equal fingerprints give equal step logs; a field that is null was not recorded and
matches nothing.
"""
import glob
import json
import os
import sys

# Within tolerance, on a machine no golden was recorded on: these fields exactly, ...
EXACT = ("run", "step", "skipped", "found_inf", "overflows", "loss_scale", "lr")
# ... these within a relative tolerance. Measured between an AMD EPYC (AVX512-BF16) and an Intel
# Xeon (AMX-BF16), every run of golden_runs.sh: the fp32 and fp16 runs are identical (the same
# fp32 GEMM), the bf16 runs differ by at most 1.8e-4 (loss), 9.1e-5 (val_loss) and 1.7e-3
# (grad_norm) relative; the bounds are about 6x those.
RELATIVE = {"loss": 1e-3, "val_loss": 1e-3, "grad_norm": 1e-2}


def cpu_fingerprint():
    info = {}
    try:
        for line in open("/proc/cpuinfo"):
            if not line.strip():
                break  # the first processor is enough: all are alike here
            k, _, v = line.partition(":")
            info[k.strip()] = v.strip()
    except OSError:
        pass
    caches = {}
    for d in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            level = open(os.path.join(d, "level")).read().strip()
            kind = open(os.path.join(d, "type")).read().strip()
            size = open(os.path.join(d, "size")).read().strip()
        except OSError:
            continue
        tag = {"Data": "d", "Instruction": "i"}.get(kind, "")
        caches[f"L{level}{tag}"] = size
    num = lambda s: int(s) if s is not None and s.isdigit() else None
    return {
        "cpu_vendor": info.get("vendor_id"),
        "cpu_family": num(info.get("cpu family")),
        "cpu_model": num(info.get("model")),
        "cpu_model_name": info.get("model name"),
        "caches": caches or None,
    }


def fingerprint(info_json):
    j = json.load(open(info_json))
    fp = cpu_fingerprint()
    # The build too: the optimisation level changes how float loops are vectorised and contracted
    # (an -O1 build differs from the release build's -O3 in the last bits, and pure fp16 runs
    # amplify that within a few steps).
    fp.update({"cpu_features": j["cpu_features"], "onednn": j.get("onednn"), "gemm": j["gemm"],
               "threads": j["threads"], "build": j.get("build")})
    return fp


def load_golden(path):
    with open(path) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    if not lines or "golden" not in lines[0]:
        raise SystemExit(f"{path}: line 1 is not a golden header {{\"golden\": ...}}")
    return lines[0]["golden"], lines[1:]


def goldens(directory):
    out = [(p, *load_golden(p)) for p in sorted(glob.glob(os.path.join(directory, "*.jsonl")))]
    if not out:
        raise SystemExit(f"no golden files (*.jsonl) in {directory}")
    return out


def find(directory, fp):
    for path, head, _ in goldens(directory):
        if head["fingerprint"] == fp:
            return path
    return None


def differing(a, b):
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def compare(want, got, tolerance):
    """Prints up to 5 differences; returns the number of differing steps."""
    bad = 0
    for w, g in zip(want, got):
        diff = {}
        for k in sorted(set(w) | set(g)):
            x, y = w.get(k), g.get(k)
            if x == y:
                continue
            if tolerance and k in RELATIVE and isinstance(x, (int, float)) and isinstance(y, (int, float)) \
                    and not isinstance(x, bool) and abs(x - y) <= RELATIVE[k] * max(abs(x), abs(y)):
                continue
            diff[k] = (x, y)
        if diff:
            bad += 1
            if bad <= 5:
                print(f"run {w.get('run')} step {w.get('step')}: (golden, now) {diff}")
    if len(want) != len(got):
        print(f"{len(want)} golden lines, {len(got)} now")
        bad += 1
    return bad


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "fingerprint" and len(argv) == 3:
        print(json.dumps(fingerprint(argv[2]), sort_keys=True))
        return 0
    if cmd == "name" and len(argv) == 3:
        f = json.load(open(argv[2]))
        print(f"{f['cpu_vendor']}-{f['cpu_family']}-{f['cpu_model']}")
        return 0
    if cmd == "header" and len(argv) == 4:
        print(json.dumps({"golden": {"machine": argv[2], "fingerprint": json.load(open(argv[3]))}}, sort_keys=True))
        return 0
    if cmd == "find" and len(argv) == 4:
        path = find(argv[2], json.load(open(argv[3])))
        if path:
            print(path)
        return 0 if path else 1
    if cmd == "compare" and len(argv) == 5:
        fp = json.load(open(argv[4]))
        got = [json.loads(l) for l in open(argv[3]) if l.strip()]
        all_goldens = goldens(argv[2])
        same = [g for g in all_goldens if g[1]["fingerprint"] == fp]
        if same:
            path, head, want = same[0]
            print(f"golden {os.path.basename(path)} was recorded on this machine ({head['machine']}): "
                  f"comparing bit for bit")
            tolerance = False
        else:
            # The nearest: the most fingerprint fields in common (the GEMM implementations first).
            def nearness(g):
                f = g[1]["fingerprint"]
                return (sum(f.get("gemm", {}).get(k) == v for k, v in fp["gemm"].items()),
                        sum(f.get(k) == v for k, v in fp.items()))
            path, head, want = max(all_goldens, key=nearness)
            print(f"no golden in {argv[2]} was recorded on this machine; the nearest, "
                  f"{os.path.basename(path)} ({head['machine']}), differs in {', '.join(differing(head['fingerprint'], fp))}: "
                  f"comparing within tolerance ({', '.join(EXACT)} exactly; relative "
                  f"{', '.join(f'{k} {v:g}' for k, v in RELATIVE.items())}). "
                  f"To compare bit for bit here, record this machine's: tools/make_golden_trajectories.sh")
            tolerance = True
        bad = compare(want, got, tolerance)
        print(f"{len(want) - bad} of {len(want)} golden steps {'within tolerance' if tolerance else 'identical'}")
        return 1 if bad else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
