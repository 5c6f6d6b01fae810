#!/usr/bin/env python3
"""Writes a randomly initialised BERT or DistilBERT encoder of a chosen shape, with all-MiniLM-L6-v2's
tokenizer, for speed and memory measurements at shapes no installed checkpoint has
(bench/finetune_shapes.sh): BERT-base, or DistilBERT-base (the reference experiment's model).

The weights are transformers' own initialisation (BertModel / DistilBertModel, seeded), so a fine-tune of this
directory measures time and memory only: its accuracy means nothing. The vocabulary, and so the
token ids of every batch, are MiniLM's, which keeps the batches (lengths, padding) identical to
the MiniLM fine-tune's.

    .venv-dev/bin/python bench/make_random_encoder.py --out /tmp/bert-base-random \
        [--kind bert|distilbert] [--tokenizer build/data/models/all-minilm-l6-v2] \
        [--hidden 768 --layers 12 --heads 12 --intermediate 3072]

A development tool (tools/setup_dev_venv.sh makes the venv); nothing in the build or the tests runs it.
"""

import argparse
import os
import shutil

import torch
from transformers import BertConfig, BertModel, DistilBertConfig, DistilBertModel

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory to write (config.json, model.safetensors, tokenizer)")
    ap.add_argument("--tokenizer", default="build/data/models/all-minilm-l6-v2",
                    help="model directory whose vocabulary and tokenizer files are copied")
    ap.add_argument("--kind", choices=("bert", "distilbert"), default="bert")
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--intermediate", type=int, default=3072)
    ap.add_argument("--seed", type=int, default=1337)
    a = ap.parse_args()
    if a.hidden % a.heads != 0:
        ap.error(f"--hidden {a.hidden} is not a multiple of --heads {a.heads}")
    vocab = os.path.join(a.tokenizer, "vocab.txt")
    if not os.path.isfile(vocab):
        ap.error(f"{vocab}: not found (run scripts/setup_data.sh, or pass --tokenizer DIR)")
    with open(vocab, encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    torch.manual_seed(a.seed)
    if a.kind == "bert":
        cfg = BertConfig(vocab_size=vocab_size, hidden_size=a.hidden, num_hidden_layers=a.layers,
                         num_attention_heads=a.heads, intermediate_size=a.intermediate, max_position_embeddings=512,
                         type_vocab_size=2, hidden_act="gelu", layer_norm_eps=1e-12, pad_token_id=0)
        model = BertModel(cfg).float()
    else:
        cfg = DistilBertConfig(vocab_size=vocab_size, dim=a.hidden, n_layers=a.layers, n_heads=a.heads,
                               hidden_dim=a.intermediate, max_position_embeddings=512, activation="gelu",
                               sinusoidal_pos_embds=False, pad_token_id=0)
        model = DistilBertModel(cfg).float()
    os.makedirs(a.out, exist_ok=True)
    model.save_pretrained(a.out, safe_serialization=True)
    for name in TOKENIZER_FILES:
        src = os.path.join(a.tokenizer, name)
        if os.path.isfile(src):
            shutil.copyfile(src, os.path.join(a.out, name))
    n = sum(p.numel() for p in model.parameters())
    print(f"{a.out}: random {a.kind}, hidden {a.hidden}, {a.layers} layers, {a.heads} heads, "
          f"FFN {a.intermediate}, vocabulary {vocab_size}: {n / 1e6:.1f}M parameters")


if __name__ == "__main__":
    main()
