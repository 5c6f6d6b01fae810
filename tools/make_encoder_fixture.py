#!/usr/bin/env python3
"""Writes the golden PyTorch results mixtrain's encoder classifiers are checked against.

tests/fixtures/encoder/bert_tiny/ and distilbert_tiny/: a tiny random BertForSequenceClassification
and DistilBertForSequenceClassification (float32, seeded, biases and layer-norm parameters
perturbed so that bugs through them show), saved with save_pretrained (config.json,
model.safetensors): the directories the C++ test loads with load_encoder_classifier.
tests/fixtures/encoder/bert_tiny.mtfx, distilbert_tiny.mtfx: one batch with padding and token
types (a fully padded row with target -1 among them), the logits, the loss (mean cross-entropy
over rows whose target is not -1), every parameter gradient under Hugging Face's names, a
3-step AdamW trajectory (losses and final weights); for BERT also mean pooling (the masked mean
of the last hidden state into the same classifier, no pooler: logits, loss, gradients).
tests/fixtures/encoder/minilm.mtfx: the real all-MiniLM-L6-v2 (data/models/all-minilm-l6-v2, from
scripts/setup_data.sh) with a seeded 2-label head (stored in the fixture) on one small batch:
logits, loss and the gradients of a few chosen tensors (the file stays small).
PyTorch and transformers are development tools only: the C++ tests read these files.

Regenerate (dev venv from tools/setup_dev_venv.sh; the bytes depend on the torch version):
    python tools/make_encoder_fixture.py [--minilm DIR]

File format: the ".mtfx" of tools/make_gpt_fixture.py (its docstring is the authority).
Dimension letters: B batch, T sequence, C hidden, V vocab, K labels.
"""

import argparse
import hashlib
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F
from transformers import (BertConfig, BertForSequenceClassification, DistilBertConfig,
                          DistilBertForSequenceClassification)

MAGIC = b"MXFIXTUR"
VERSION = 1
ALIGN = 64
PREAMBLE = 24

LABELS = ["negative", "neutral", "positive"]  # K = 3
SEED = 1337
HYPER = {
    "optimizer": "torch.optim.AdamW",
    "steps": 3,
    "lr": 1e-3,
    "beta1": 0.9,
    "beta2": 0.999,
    "eps": 1e-8,
    "weight_decay": 0.01,
    "weight_decay_rule": "dim>=2",
    "perturb_std": 0.1,
    "loss": "F.cross_entropy(logits, targets, ignore_index=-1)",
}


def serialize(config, names, tensors):
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
        entries[name] = {"dtype": dtype, "shape": list(arr.shape), "offset": offset, "nbytes": len(data)}
        chunks.append(data)
        offset += len(data)
    header = {"config": config, "hyper": HYPER, "torch_version": torch.__version__,
              "param_names": names, "tensors": entries}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-(PREAMBLE + len(text))) % ALIGN)
    return MAGIC + struct.pack("<IIQ", VERSION, 0, len(text)) + text + b"".join(chunks)


def write(path, blob):
    with open(path, "wb") as f:
        f.write(blob)
    print(f"wrote {path}: {len(blob)} bytes, sha256 {hashlib.sha256(blob).hexdigest()[:16]}")


def eager(model):
    # Eager attention: the additive finfo.min mask of Hugging Face's BERT (a fully padded row
    # attends uniformly), the semantics mixtrain's masked_softmax follows.
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("eager")
    else:
        model.config._attn_implementation = "eager"
    return model


@torch.no_grad()
def perturb(model, gen):
    for name, p in model.named_parameters():
        if name.endswith(".bias") and p.dim() == 1:
            p.add_(HYPER["perturb_std"] * torch.randn(p.shape, generator=gen))
        elif ("LayerNorm" in name or "layer_norm" in name) and name.endswith(".weight"):
            p.add_(HYPER["perturb_std"] * torch.randn(p.shape, generator=gen))


def tiny_batch(V, gen, B=4, T=9, lengths=(9, 6, 3, 0), segment_a=(5, 3, 3, 0)):
    """input_ids, token_type_ids, attention_mask (B, T) and targets (B); row 3 is all padding."""
    ids = torch.zeros(B, T, dtype=torch.long)
    types = torch.zeros(B, T, dtype=torch.long)
    mask = torch.zeros(B, T, dtype=torch.long)
    for b, (n, a) in enumerate(zip(lengths, segment_a)):
        ids[b, :n] = torch.randint(1, V, (n,), generator=gen)
        mask[b, :n] = 1
        types[b, a:n] = 1
    targets = torch.tensor([2, 0, 1, -1])
    return ids, types, mask, targets


def batch_tensors(ids, types, mask, targets):
    return {"input_ids": ids.to(torch.int32).numpy(), "token_type_ids": types.to(torch.int32).numpy(),
            "attention_mask": mask.to(torch.int32).numpy(), "targets": targets.to(torch.int32).numpy()}


def run(model, ids, types, mask, targets, bert):
    kw = {"token_type_ids": types} if bert else {}
    logits = model(input_ids=ids, attention_mask=mask, **kw).logits  # (B, K)
    return logits, F.cross_entropy(logits, targets, ignore_index=-1)


def mean_pooled(model, ids, types, mask, targets):
    """BERT with mean pooling: the masked mean of the last hidden state, no pooler, classifier."""
    h = model.bert(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state  # (B, T, C)
    m = mask.to(h.dtype).unsqueeze(-1)                                # (B, T, 1)
    pooled = (h * m).sum(1) / m.sum(1).clamp(min=1.0)                 # (B, C); a padding row: 0
    logits = model.classifier(model.dropout(pooled))
    return logits, F.cross_entropy(logits, targets, ignore_index=-1)


def grads(model, prefix, skip=()):
    return {prefix + n: p.grad.detach().numpy().copy() for n, p in model.named_parameters()
            if p.grad is not None and not any(n.startswith(s) for s in skip)}


def tiny(kind, outdir):
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    bert = kind == "bert"
    common = dict(vocab_size=99, max_position_embeddings=24, num_labels=len(LABELS), pad_token_id=0,
                  id2label=dict(enumerate(LABELS)), label2id={l: i for i, l in enumerate(LABELS)},
                  initializer_range=0.02)
    if bert:
        cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                         type_vocab_size=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                         layer_norm_eps=1e-12, **common)
        model = eager(BertForSequenceClassification(cfg))
    else:
        cfg = DistilBertConfig(dim=32, n_layers=2, n_heads=4, hidden_dim=37, dropout=0.0, attention_dropout=0.0,
                               seq_classif_dropout=0.0, sinusoidal_pos_embds=False, **common)
        model = eager(DistilBertForSequenceClassification(cfg))
    model.float().train()
    perturb(model, gen)
    name = f"{kind}_tiny"
    model.save_pretrained(os.path.join(outdir, name), safe_serialization=True)
    ids, types, mask, targets = tiny_batch(cfg.vocab_size, gen)
    names = [n for n, _ in model.named_parameters()]
    init = {n: p.detach().clone() for n, p in model.named_parameters()}

    tensors = batch_tensors(ids, types, mask, targets)
    model.zero_grad(set_to_none=True)
    logits, loss = run(model, ids, types, mask, targets, bert)
    loss.backward()
    tensors["logits"] = logits.detach().numpy()
    tensors["loss"] = loss.detach().reshape(()).numpy()
    tensors.update(grads(model, "grad."))
    if bert:
        model.zero_grad(set_to_none=True)
        logits, loss = mean_pooled(model, ids, types, mask, targets)
        loss.backward()
        tensors["mean.logits"] = logits.detach().numpy()
        tensors["mean.loss"] = loss.detach().reshape(()).numpy()
        tensors.update(grads(model, "mean.grad.", skip=("bert.pooler.",)))

    params = [p for _, p in model.named_parameters()]
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": HYPER["weight_decay"]},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                            lr=HYPER["lr"], betas=(HYPER["beta1"], HYPER["beta2"]), eps=HYPER["eps"],
                            foreach=False, fused=False)
    losses = []
    for _ in range(HYPER["steps"]):
        opt.zero_grad(set_to_none=True)
        _, loss = run(model, ids, types, mask, targets, bert)
        loss.backward()
        losses.append(loss.item())
        opt.step()
    tensors["adamw.losses"] = np.array(losses, dtype=np.float32)
    for n, p in model.named_parameters():
        tensors["final." + n] = p.detach().numpy().copy()
    with torch.no_grad():  # the saved directory holds the initial weights
        for n, p in model.named_parameters():
            p.copy_(init[n])
    config = {"kind": kind, "labels": LABELS, "dir": name}
    write(os.path.join(outdir, name + ".mtfx"), serialize(config, names, tensors))
    print(f"  {name}: loss {tensors['loss'].item():.6f}, adamw " + " ".join(f"{x:.5f}" for x in losses))


MINILM_GRADS = [
    "classifier.weight", "classifier.bias", "bert.pooler.dense.weight", "bert.embeddings.LayerNorm.weight",
    "bert.embeddings.token_type_embeddings.weight", "bert.encoder.layer.0.attention.self.query.weight",
    "bert.encoder.layer.3.intermediate.dense.bias", "bert.encoder.layer.5.output.dense.bias",
    "bert.encoder.layer.5.output.LayerNorm.weight",
]


def minilm(src, outdir):
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED + 1)
    labels = ["no", "yes"]
    model = eager(BertForSequenceClassification.from_pretrained(
        src, num_labels=2, id2label=dict(enumerate(labels)), label2id={l: i for i, l in enumerate(labels)},
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    model.float().train()
    with torch.no_grad():  # the head, seeded here and stored in the fixture
        model.classifier.weight.normal_(0.0, 0.02, generator=gen)
        model.classifier.bias.normal_(0.0, 0.02, generator=gen)
    B, T = 3, 12
    lengths, seg = (12, 8, 5), (6, 4, 5)
    ids = torch.zeros(B, T, dtype=torch.long)
    types = torch.zeros(B, T, dtype=torch.long)
    mask = torch.zeros(B, T, dtype=torch.long)
    for b, (n, a) in enumerate(zip(lengths, seg)):
        ids[b, :n] = torch.randint(1000, 30000, (n,), generator=gen)
        ids[b, 0], ids[b, n - 1] = 101, 102  # [CLS] ... [SEP]
        mask[b, :n] = 1
        types[b, a:n] = 1
    targets = torch.tensor([1, 0, 1])
    tensors = batch_tensors(ids, types, mask, targets)
    tensors["head.classifier.weight"] = model.classifier.weight.detach().numpy().copy()
    tensors["head.classifier.bias"] = model.classifier.bias.detach().numpy().copy()
    model.zero_grad(set_to_none=True)
    logits, loss = run(model, ids, types, mask, targets, True)
    loss.backward()
    tensors["logits"] = logits.detach().numpy()
    tensors["loss"] = loss.detach().reshape(()).numpy()
    params = dict(model.named_parameters())
    for n in MINILM_GRADS:
        tensors["grad." + n] = params[n].grad.detach().numpy().copy()
    config = {"kind": "minilm", "labels": labels, "model": "all-minilm-l6-v2"}
    write(os.path.join(outdir, "minilm.mtfx"), serialize(config, MINILM_GRADS, tensors))
    print(f"  minilm: loss {tensors['loss'].item():.6f}")


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(repo, "tests", "fixtures", "encoder"))
    ap.add_argument("--minilm", default=os.path.join(repo, "data", "models", "all-minilm-l6-v2"))
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    tiny("bert", args.out)
    tiny("distilbert", args.out)
    minilm(args.minilm, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
