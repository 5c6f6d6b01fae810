#!/usr/bin/env python3
"""Writes the libFuzzer seed corpus (fuzz/corpus/<target>/): small valid inputs of each format
plus a few near misses. Standard library only. Usage: python3 fuzz/make_seed_corpus.py"""
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def safetensors(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, raw bytes). Same layout as mixtrain's writer."""
    header, off, data = {}, 0, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def bf16(*v):
    return b"".join(struct.pack("<f", x)[2:] for x in v)


def state(kind, dtype, n, extra=None):
    body = {
        "step": 3, "precision": {"F32": "16-mixed", "BF16": "bf16-true"}[dtype],
        "model": {"name": "tiny", "vocab_size": 256, "block_size": 16, "n_layer": 1, "n_head": 2, "n_embd": 16,
                  "dropout": 0.0, "ln_eps": 1e-05},
        "run": {"lr": 0.001, "seed": 1337},
        "optimizer": {"kind": kind, "steps": 2},
        "scaler": {"scale": 32768.0, "growth_tracker": 1, "hysteresis_left": 1, "overflows": 1, "skipped_steps": 1},
        "counters": {"skipped_steps": 1, "overflows": 1, "bad_in_a_row": 0, "hit_min_scale": False, "last_loss": 5.5},
        "rng": {"seed": 1337, "data_position": 3, "stochastic_rounding_counter": 2 * n},
    }
    enc = f32 if dtype == "F32" else bf16
    vals = [0.25 * i for i in range(n)]
    tensors = [("params", dtype, [n], enc(*vals))]
    if kind == "adamw":
        tensors += [("optim.exp_avg", dtype, [n], enc(*vals)), ("optim.exp_avg_sq", dtype, [n], enc(*vals))]
    else:
        tensors += [("optim.momentum_buffer", dtype, [n], enc(*vals))]
    if extra:
        tensors += extra
    meta = {"format": "mixtrain-train-state", "version": "1", "mixtrain": json.dumps(body)}
    return safetensors(tensors, meta)


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


write("safetensors", "empty", safetensors([]))
write("safetensors", "mixed_dtypes", safetensors(
    [("transformer.h.0.attn.c_attn.weight", "F32", [2, 3], f32(*range(6))),
     ("transformer.ln_f.bias", "BF16", [2], bf16(1.0, -2.0)),
     ("ids", "I64", [1], struct.pack("<q", 7)),
     ("zero", "F16", [0, 4], b"")],
    {"format": "pt"}))
write("safetensors", "one_tensor", safetensors([("a", "F32", [1], f32(1.0))]))
write("safetensors", "truncated", safetensors([("a", "F32", [4], f32(1, 2, 3, 4))])[:-3])
write("training_state", "adamw_f32", state("adamw", "F32", 4))
write("training_state", "sgd_bf16", state("sgd", "BF16", 3))
write("training_state", "adamw_bf16_kahan", state("adamw", "BF16", 2, [("optim.compensation", "BF16", [2], bf16(0, 0))]))
write("config", "mixtrain", json.dumps({"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 64, "dropout": 0.1}))
write("config", "hf_gpt2", json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
                                       "n_positions": 1024, "vocab_size": 50257, "layer_norm_epsilon": 1e-05}))
write("config", "bad_type", '{"n_layer": "2"}')
write("config", "nested", '{"n_layer": [1, {"a": null}], "name": "x\\u00e9"}')
