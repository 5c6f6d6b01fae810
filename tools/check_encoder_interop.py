#!/usr/bin/env python3
"""Checks that model directories written by mixtrain's save_encoder_classifier load in transformers
(AutoModelForSequenceClassification.from_pretrained) and give mixtrain's logits (fp32: max |difference|
<= 1e-4 x max |logit|), with the labels of config.json. Development tool: needs the dev venv
(tools/setup_dev_venv.sh). The directories come from the C++ test encoder_io_test, which saves
tiny BERT, tiny DistilBERT and all-MiniLM-L6-v2 classifiers after one AdamW step into
build/encoder_interop/<name>/ with mixtrain_logits.json (the batch and mixtrain's logits) beside them:

    ctest --test-dir build -R encoder_io_test
    .venv-dev/bin/python tools/check_encoder_interop.py [build/encoder_interop/*]
"""
import argparse
import glob
import json
import os
import sys

import torch
from transformers import AutoModelForSequenceClassification


def check(d):
    ref = json.load(open(os.path.join(d, "mixtrain_logits.json")))
    B, T = ref["batch"], ref["seq"]
    model = AutoModelForSequenceClassification.from_pretrained(d, attn_implementation="eager")
    model.eval()
    ids = torch.tensor(ref["input_ids"]).view(B, T)
    mask = torch.tensor(ref["attention_mask"]).view(B, T)
    kw = {}
    if model.config.model_type == "bert":
        kw["token_type_ids"] = torch.tensor(ref["token_type_ids"]).view(B, T)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, **kw).logits.float()
    want = torch.tensor(ref["logits"]).view(logits.shape)
    diff = (logits - want).abs().max().item()
    scale = want.abs().max().item()
    ok = diff <= 1e-4 * scale
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    print(f"{'ok  ' if ok else 'FAIL'} {d}: {type(model).__name__}, labels {labels}, "
          f"max |d logit| {diff:.3g} (bound {1e-4 * scale:.3g})")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", default=sorted(glob.glob("build/encoder_interop/*")))
    args = ap.parse_args()
    if not args.dirs:
        sys.exit("no directories: run `ctest --test-dir build -R encoder_io_test` first")
    return 0 if all([check(d) for d in args.dirs]) else 1


if __name__ == "__main__":
    sys.exit(main())
