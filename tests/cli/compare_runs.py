#!/usr/bin/env python3
"""Compares two mixtrain runs for the data-parallel tests: step logs (loss, loss scale, skips) and,
optionally, the weights of two checkpoints (model.safetensors). Prints the worst differences and
exits 1 when one is over its tolerance.

usage: compare_runs.py LOG_A LOG_B --loss-rtol R [--weights-atol A --checkpoints MODEL_A MODEL_B]
"""
import argparse
import json
import struct
import sys


def load_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = body[a:b]
        if t["dtype"] == "F32":
            out[name] = struct.unpack(f"<{len(raw) // 4}f", raw)
        elif t["dtype"] == "BF16":
            words = struct.unpack(f"<{len(raw) // 2}H", raw)
            out[name] = [struct.unpack("<f", struct.pack("<I", w << 16))[0] for w in words]
        elif t["dtype"] == "F16":
            out[name] = struct.unpack(f"<{len(raw) // 2}e", raw)
        else:
            raise SystemExit(f"{path}: {name}: unexpected dtype {t['dtype']}")
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("log_a")
    p.add_argument("log_b")
    p.add_argument("--loss-rtol", type=float, required=True)
    p.add_argument("--weights-atol", type=float)
    p.add_argument("--checkpoints", nargs=2, metavar=("MODEL_A", "MODEL_B"), help="model.safetensors files")
    args = p.parse_args()
    a, b = load_log(args.log_a), load_log(args.log_b)
    bad = []
    if len(a) != len(b):
        bad.append(f"{len(a)} steps against {len(b)}")
    worst = (0.0, 0)
    for x, y in zip(a, b):
        for key in ("step", "loss_scale", "skipped"):
            if x.get(key) != y.get(key):
                bad.append(f"step {x.get('step')}: {key} {x.get(key)} against {y.get(key)}")
        lx, ly = x["loss"], y["loss"]
        if isinstance(lx, float) and isinstance(ly, float):
            rel = abs(lx - ly) / max(abs(ly), 1e-30)
            worst = max(worst, (rel, x["step"]))
        elif lx != ly:
            bad.append(f"step {x['step']}: loss {lx} against {ly}")
    print(f"max relative loss difference {worst[0]:.3g} (step {worst[1]}), tolerance {args.loss_rtol:g}")
    if worst[0] > args.loss_rtol:
        bad.append(f"loss differs by {worst[0]:.3g} relative at step {worst[1]}")
    if args.weights_atol is not None:
        wa, wb = load_safetensors(args.checkpoints[0]), load_safetensors(args.checkpoints[1])
        if wa.keys() != wb.keys():
            bad.append("the checkpoints hold different tensors")
        diff, where = 0.0, ""
        for name in wa:
            for u, v in zip(wa[name], wb.get(name, [])):
                if abs(u - v) > diff:
                    diff, where = abs(u - v), name
        print(f"max weight difference {diff:.3g} ({where}), tolerance {args.weights_atol:g}")
        if diff > args.weights_atol:
            bad.append(f"weights differ by {diff:.3g} in {where}")
    for line in bad:
        print("DIFFERENCE:", line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
