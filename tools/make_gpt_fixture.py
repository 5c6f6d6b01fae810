#!/usr/bin/env python3
"""Writes tests/fixtures/gpt_tiny.mtfx: the golden PyTorch results mixtrain's GPT is checked against.

A tiny GPT-2 (same math as nanoGPT's model.py, written out plainly here), float32 on the CPU,
seeded: its initial parameters, one batch, the logits, the loss, every gradient, and a 10-step
AdamW trajectory (nanoGPT's two weight-decay groups, gradient clipping at 1.0) on that batch.
PyTorch is a development tool only: the C++ tests read the file, never Python.

Regenerate (the dev venv comes from tools/setup_dev_venv.sh; the bytes depend on the torch version):
    python tools/make_gpt_fixture.py            # writes tests/fixtures/gpt_tiny.mtfx
    python tools/make_gpt_fixture.py --out X    # somewhere else

File format (".mtfx", little-endian throughout; tests/fixtures/fixture.h reads it):
    offset 0   8 bytes   magic b"MXFIXTUR"
    offset 8   uint32    version = 1
    offset 12  uint32    reserved = 0
    offset 16  uint64    header_len
    offset 24  header_len bytes of UTF-8 JSON, padded with trailing spaces so the data section
               starts at a multiple of 64 bytes in the file:
               {"config": {...}, "hyper": {...}, "torch_version": "...", "param_names": [...],
                "tensors": {"name": {"dtype": "f32"|"i32", "shape": [...],
                                     "offset": <bytes from the start of the data section>,
                                     "nbytes": <bytes>}}}
    then       the data section: each tensor row-major, contiguous, at an offset that is a
               multiple of 64, zero bytes between tensors.

Dimension letters: B batch, T sequence, C channels (n_embd), V vocab, L layers, H heads,
D = C / H head size.
"""

import argparse
import hashlib
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MAGIC = b"MXFIXTUR"
VERSION = 1
ALIGN = 64
PREAMBLE = 24  # magic + version + reserved + header_len

CONFIG = {
    "vocab_size": 96,   # V
    "block_size": 16,   # rows of wpe; T < block_size tests the position slicing
    "n_layer": 2,       # L
    "n_head": 4,        # H
    "n_embd": 32,       # C
    "dropout": 0.0,
    "ln_eps": 1e-5,
    "gelu": "tanh",     # F.gelu(x, approximate='tanh')
    "tied_lm_head": True,  # logits = x @ wte^T
    "batch": 3,         # B
    "seq_len": 12,      # T
    "seed": 1337,
}

HYPER = {
    "optimizer": "torch.optim.AdamW",
    "steps": 10,
    "lr": 1e-3,
    "beta1": 0.9,
    "beta2": 0.95,
    "eps": 1e-8,
    # nanoGPT's groups: parameters with dim >= 2 (Linear weights, embeddings) decay, the rest
    # (biases, layer-norm parameters) do not. Decoupled decay: p -= lr * wd * p before the update.
    "weight_decay": 0.1,
    "weight_decay_rule": "dim>=2",
    "grad_clip": 1.0,  # torch.nn.utils.clip_grad_norm_(params, 1.0) before each step
    "init_std": 0.02,
    "c_proj_init_std": 0.02 / math.sqrt(2 * CONFIG["n_layer"]),
    "perturb_std": 0.02,  # noise on biases and layer-norm parameters (LN weight = 1 + noise)
    "adamw_losses": "loss before the update of step k = 1..steps",
    "adamw_grad_norms": "total norm returned by clip_grad_norm_ (before clipping), step k",
}


class CausalSelfAttention(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.n_head = H
        self.c_attn = nn.Linear(C, 3 * C)  # weight (3C, C), bias (3C)
        self.c_proj = nn.Linear(C, C)      # weight (C, C), bias (C)

    def forward(self, x):  # x (B, T, C)
        B, T, C = x.shape
        H = self.n_head
        D = C // H
        qkv = self.c_attn(x)                      # (B, T, 3C)
        q, k, v = qkv.split(C, dim=2)             # each (B, T, C), in that order
        q = q.view(B, T, H, D).transpose(1, 2)    # (B, H, T, D)
        k = k.view(B, T, H, D).transpose(1, 2)    # (B, H, T, D)
        v = v.view(B, T, H, D).transpose(1, 2)    # (B, H, T, D)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))  # (B, H, T, T)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~causal, float("-inf"))  # key j > query i is masked out
        att = F.softmax(att, dim=-1)
        y = att @ v                                # (B, H, T, D)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)    # weight (4C, C), bias (4C)
        self.c_proj = nn.Linear(4 * C, C)  # weight (C, 4C), bias (C)

    def forward(self, x):  # (B, T, C) -> (B, T, C)
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    # Registration order fixes the parameter order: ln_1, attn, ln_2, mlp.
    def __init__(self, C, H, eps):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=eps)
        self.attn = CausalSelfAttention(C, H)
        self.ln_2 = nn.LayerNorm(C, eps=eps)
        self.mlp = MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        V, C, L, H = cfg["vocab_size"], cfg["n_embd"], cfg["n_layer"], cfg["n_head"]
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(V, C),                    # (V, C), also the output projection
            wpe=nn.Embedding(cfg["block_size"], C),    # (block_size, C)
            h=nn.ModuleList([Block(C, H, cfg["ln_eps"]) for _ in range(L)]),
            ln_f=nn.LayerNorm(C, eps=cfg["ln_eps"]),
        ))

    def forward(self, idx, targets):  # idx, targets (B, T) int64
        B, T = idx.shape
        tr = self.transformer
        x = tr.wte(idx) + tr.wpe(torch.arange(T))     # (B, T, C); wpe rows 0..T-1
        for block in tr.h:
            x = block(x)
        x = tr.ln_f(x)
        logits = x @ tr.wte.weight.t()                 # (B, T, V), tied to wte
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))  # mean
        return logits, loss


def expected_param_names(L):
    names = ["transformer.wte.weight", "transformer.wpe.weight"]
    for l in range(L):
        p = f"transformer.h.{l}."
        names += [p + s for s in (
            "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
            "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
            "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")]
    names += ["transformer.ln_f.weight", "transformer.ln_f.bias"]
    return names


@torch.no_grad()
def init_params(model, gen):
    # GPT-2's init (normal(0, 0.02); c_proj weights scaled by 1/sqrt(2L)), then noise on biases and
    # layer-norm parameters: zero biases and unit LN weights would hide gradient bugs through them.
    std, pstd = HYPER["init_std"], HYPER["perturb_std"]
    for name, p in model.named_parameters():  # fixed order, so fixed draws from gen
        if name.endswith("c_proj.weight"):
            p.normal_(0.0, HYPER["c_proj_init_std"], generator=gen)
        elif p.dim() >= 2:
            p.normal_(0.0, std, generator=gen)
        elif ".ln_" in name and name.endswith(".weight"):
            p.copy_(1.0 + pstd * torch.randn(p.shape, generator=gen))
        else:  # biases (Linear and layer norm)
            p.copy_(pstd * torch.randn(p.shape, generator=gen))


def build():
    torch.manual_seed(CONFIG["seed"])
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # one summation order, so the bytes repeat on any machine
    gen = torch.Generator().manual_seed(CONFIG["seed"])

    V, L = CONFIG["vocab_size"], CONFIG["n_layer"]
    B, T = CONFIG["batch"], CONFIG["seq_len"]
    assert T < CONFIG["block_size"] and CONFIG["n_embd"] % CONFIG["n_head"] == 0

    model = GPT(CONFIG)  # float32 on the CPU
    names = [n for n, _ in model.named_parameters()]
    assert names == expected_param_names(L), names
    init_params(model, gen)
    idx = torch.randint(0, V, (B, T), generator=gen)
    targets = torch.randint(0, V, (B, T), generator=gen)

    tensors = {}  # name -> numpy array, in file order
    init_state = {n: p.detach().clone() for n, p in model.named_parameters()}
    for n in names:
        tensors[n] = init_state[n].numpy()
    tensors["idx"] = idx.to(torch.int32).numpy()
    tensors["targets"] = targets.to(torch.int32).numpy()

    # One forward and backward from the initial weights.
    model.zero_grad(set_to_none=True)
    logits, loss = model(idx, targets)
    loss.backward()
    tensors["logits"] = logits.detach().numpy()              # (B, T, V)
    tensors["loss"] = loss.detach().reshape(()).numpy()       # scalar, shape []
    for n, p in model.named_parameters():
        tensors["grad." + n] = p.grad.detach().numpy().copy()

    # AdamW trajectory on the same batch, starting again from the initial weights.
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(init_state[n])
    params = [p for _, p in model.named_parameters()]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": HYPER["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=HYPER["lr"], betas=(HYPER["beta1"], HYPER["beta2"]), eps=HYPER["eps"],
        foreach=False, fused=False)
    losses, norms = [], []
    for _ in range(HYPER["steps"]):
        opt.zero_grad(set_to_none=True)
        _, loss = model(idx, targets)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, HYPER["grad_clip"], foreach=False)
        losses.append(loss.item())
        norms.append(norm.item())
        opt.step()
    tensors["adamw.losses"] = np.array(losses, dtype=np.float32)
    tensors["adamw.grad_norms"] = np.array(norms, dtype=np.float32)
    for n, p in model.named_parameters():
        tensors["final." + n] = p.detach().numpy().copy()
    return names, tensors


def serialize(names, tensors):
    entries, chunks, offset = {}, [], 0
    for name, arr in tensors.items():
        if arr.dtype == np.float32:
            dtype, data = "f32", arr.astype("<f4").tobytes(order="C")
        elif arr.dtype == np.int32:
            dtype, data = "i32", arr.astype("<i4").tobytes(order="C")
        else:
            raise TypeError(f"{name}: unsupported dtype {arr.dtype}")
        pad = (-offset) % ALIGN
        chunks.append(b"\0" * pad)
        offset += pad
        entries[name] = {"dtype": dtype, "shape": list(arr.shape), "offset": offset,
                         "nbytes": len(data)}
        chunks.append(data)
        offset += len(data)
    header = {"config": CONFIG, "hyper": HYPER, "torch_version": torch.__version__,
              "param_names": names, "tensors": entries}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-(PREAMBLE + len(text))) % ALIGN)  # data section starts 64-byte aligned
    preamble = MAGIC + struct.pack("<IIQ", VERSION, 0, len(text))
    return preamble + text + b"".join(chunks)


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(repo, "tests", "fixtures", "gpt_tiny.mtfx"))
    args = ap.parse_args()
    names, tensors = build()
    blob = serialize(names, tensors)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "wb") as f:
        f.write(blob)
    print(f"wrote {args.out}: {len(blob)} bytes, {len(tensors)} tensors, "
          f"torch {torch.__version__}, sha256 {hashlib.sha256(blob).hexdigest()}")
    print(f"loss {tensors['loss'].item():.6f}; adamw losses "
          + " ".join(f"{x:.4f}" for x in tensors["adamw.losses"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
