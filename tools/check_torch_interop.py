#!/usr/bin/env python3
"""Checks that a checkpoint's model.safetensors, written by mixtrain, loads in PyTorch and gives
mixtrain's logits (fp32: max |difference| <= 1e-4 x max |logit|). Development tool: needs torch
and safetensors (tools/setup_dev_venv.sh); uses transformers' GPT2LMHeadModel when installed
(what the ecosystem reads: from_pretrained(checkpoint) itself when the checkpoint carries its
config.json), else the plain PyTorch GPT-2 of tools/make_gpt_fixture.py. A checkpoint of a run with
a tokenizer (vocab.json + merges.txt): AutoTokenizer.from_pretrained(checkpoint) must also give the
prompt mixtrain's ids.

    .venv-dev/bin/python tools/check_torch_interop.py --checkpoint runs/a/step-000100 \\
        [--mixtrain build/mixtrain] [--prompt "The quick brown fox"]
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file

CONV1D = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")


def load_plain_gpt(cfg, sd):
    """tools/make_gpt_fixture.py's GPT (nn.Linear, (out, in)): transpose the Conv1D weights back."""
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("fixture", os.path.join(here, "make_gpt_fixture.py"))
    fixture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixture)
    model = fixture.GPT(cfg)
    sd = {k: (v.t().contiguous() if k.endswith(CONV1D) else v) for k, v in sd.items()}
    model.load_state_dict(sd, strict=True)
    return lambda idx: model(idx, torch.zeros_like(idx))[0]


def load_transformers_gpt(cfg, sd):
    from transformers import GPT2Config, GPT2LMHeadModel
    conf = GPT2Config(vocab_size=cfg["vocab_size"], n_positions=cfg["block_size"], n_embd=cfg["n_embd"],
                      n_layer=cfg["n_layer"], n_head=cfg["n_head"], layer_norm_epsilon=cfg["ln_eps"],
                      activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(conf)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" or k.endswith((".attn.bias", ".attn.masked_bias")))]
    if missing or unexpected:
        sys.exit(f"GPT2LMHeadModel: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.eval()
    return lambda idx: model(idx).logits


def from_pretrained(checkpoint):
    """The checkpoint directory as it is: its config.json (GPT2Config) and model.safetensors."""
    from transformers import GPT2LMHeadModel
    model = GPT2LMHeadModel.from_pretrained(checkpoint, torch_dtype=torch.float32)
    model.eval()
    return lambda idx: model(idx).logits


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True, help="a checkpoint directory (step-NNNNNN)")
    ap.add_argument("--mixtrain", default="build/mixtrain")
    ap.add_argument("--prompt", default="The quick brown fox jumps")
    args = ap.parse_args()
    cfg = json.load(open(os.path.join(args.checkpoint, "manifest.json")))["info"]["model"]
    sd = {k: v.float() for k, v in load_file(os.path.join(args.checkpoint, "model.safetensors")).items()}
    try:
        if os.path.exists(os.path.join(args.checkpoint, "config.json")):
            forward, which = from_pretrained(args.checkpoint), "transformers GPT2LMHeadModel.from_pretrained(dir)"
        else:
            forward, which = load_transformers_gpt(cfg, sd), "transformers GPT2LMHeadModel"
    except ImportError:
        forward, which = load_plain_gpt(cfg, sd), "plain PyTorch GPT-2 (transformers not installed)"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "logits.json")
        subprocess.run([args.mixtrain, "sample", "--checkpoint", args.checkpoint, "--prompt", args.prompt,
                        "--tokens", "0", "--logits-json", out], check=True, stdout=subprocess.DEVNULL)
        ours = json.load(open(out))
    # A checkpoint of a run with a tokenizer carries vocab.json + merges.txt: transformers'
    # AutoTokenizer must give the prompt the ids mixtrain's tokenizer gave it.
    if os.path.exists(os.path.join(args.checkpoint, "vocab.json")):
        from transformers import AutoTokenizer
        ids = AutoTokenizer.from_pretrained(args.checkpoint)(args.prompt)["input_ids"]
        if ids != ours["tokens"]:
            sys.exit(f"AutoTokenizer: ids {ids[:16]}..., mixtrain {ours['tokens'][:16]}...: FAIL")
        print(f"AutoTokenizer.from_pretrained(dir): the prompt's {len(ids)} ids are mixtrain's: OK")
    idx = torch.tensor([ours["tokens"]], dtype=torch.long)
    with torch.no_grad():
        theirs = forward(idx)[0].double()
    mine = torch.tensor(ours["logits"], dtype=torch.float64)
    err = (theirs - mine).abs().max().item()
    scale = theirs.abs().max().item()
    ok = err <= 1e-4 * scale
    print(f"{which}: max |logit difference| {err:.3g}, max |logit| {scale:.3g}, relative {err / scale:.3g}: "
          f"{'OK' if ok else 'FAIL'} (limit 1e-4)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
