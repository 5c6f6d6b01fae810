#!/usr/bin/env python3
"""PyTorch on the same machine, the same GPT, the same step: the peer figure for `mixtrain bench train`.

Builds mixtrain's GPT (GPT-2 architecture: learned positions, pre-LN blocks, tanh GELU, biases,
the output projection tied to the token embedding; the presets of include/mixtrain/models/gpt.h)
and times full training steps (forward, backward, global-norm clipping at 1.0, AdamW) on the CPU
at a given batch, sequence length and thread count, in fp32 and under torch.autocast(bf16). The
attention is F.scaled_dot_product_attention(is_causal=True): what a PyTorch user writes, and
PyTorch's fastest CPU path. Batches are random tokens (speed only). A development tool: no build,
test or CI step runs it (tools/setup_dev_venv.sh makes the venv).

    python bench/peer_pytorch.py --model gpt-mini --batch-size 16 --seq-len 256 --threads 2 \\
        --steps 8 --warmup-steps 2 [--json FILE]

Prints one JSON object: {"torch_version", "threads", "config", "runs": [{"precision",
"tokens_per_s", "step_s"}]} with precision "32-true" (fp32) and "bf16-mixed" (autocast bf16).
"""

import argparse
import json
import math
import platform
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {  # include/mixtrain/models/gpt.h (GptConfig::preset)
    "gpt-nano": dict(vocab_size=256, block_size=128, n_layer=4, n_head=4, n_embd=128),
    "gpt-mini": dict(vocab_size=256, block_size=256, n_layer=6, n_head=6, n_embd=384),
    "gpt2-small": dict(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768),
}


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.n_head = H
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def time_mode(cfg, B, T, steps, warmup, autocast, seed):
    torch.manual_seed(seed)
    model = GPT(**cfg)
    # Two weight-decay groups as nanoGPT / mixtrain: matrices decay, vectors do not.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.99), eps=1e-8)
    gen = torch.Generator().manual_seed(seed)
    times = []
    for step in range(warmup + steps):
        idx = torch.randint(0, cfg["vocab_size"], (B, T), generator=gen)
        tgt = torch.randint(0, cfg["vocab_size"], (B, T), generator=gen)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        if not math.isfinite(loss.item()):
            raise SystemExit("peer_pytorch: non-finite loss")
        if step >= warmup:
            times.append(dt)
    step_s = sum(times) / len(times)
    return {"precision": "bf16-mixed" if autocast else "32-true", "tokens_per_s": B * T / step_s, "step_s": step_s}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gpt-mini", choices=sorted(PRESETS))
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=0, help="0: the model's block_size")
    ap.add_argument("--threads", type=int, default=0, help="0: torch's default")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--precisions", default="32-true,bf16-mixed")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    cfg = PRESETS[a.model]
    T = a.seq_len or cfg["block_size"]
    runs = [time_mode(cfg, a.batch_size, T, a.steps, a.warmup_steps, p == "bf16-mixed", 1337)
            for p in a.precisions.split(",")]
    out = {"torch_version": torch.__version__, "threads": torch.get_num_threads(), "machine": platform.processor() or platform.machine(),
           "config": dict(cfg, model=a.model, batch_size=a.batch_size, seq_len=T, steps=a.steps,
                          warmup_steps=a.warmup_steps), "runs": runs}
    text = json.dumps(out, indent=2)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
