#!/usr/bin/env python3
"""PyTorch on the same machine, the same inference: the peer of `mixtrain quantize --compare`.

Loads a classifier saved by `mixtrain finetune --save DIR` with transformers
(AutoModelForSequenceClassification, AutoTokenizer.from_pretrained(DIR)) and runs the test set of
the same task (Fine Foods, or fortunes split as mixtrain splits it: bench/peer_finetune.py's
readers) at the same max length, in batches of --batch (dynamic padding, file order, as mixtrain's
throughput pass), with --threads threads, three ways:

  fp32          the model as saved
  bf16          torch.autocast("cpu", torch.bfloat16) over the fp32 model (PyTorch's bf16 inference)
  int8-dynamic  torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8):
                int8 weights per tensor, activations quantized per batch at run time (fbgemm /
                onednn), the embedding tables left in fp32

and prints one JSON object: {"torch_version", "threads", "rows": [{"name", "test_accuracy",
"throughput_examples_per_s", "latency_p50_ms", "latency_p99_ms"}]}. Throughput: examples over
the time in the forward passes alone (tokenization outside), the median of --rounds passes;
latency: batch-1 requests of the first --requests test texts after 10 warm-up ones.

A development tool: no build, test or CI step runs it (tools/setup_dev_venv.sh makes the venv).

    python bench/peer_quantized_inference.py --model DIR --task finefoods --threads 2 [--batch 64]
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_finetune as pf  # noqa: E402  (the data readers, exactly mixtrain's)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--task", choices=["finefoods", "fortunes"], default="finefoods")
    ap.add_argument("--data", default=os.path.join(pf.REPO, "build/data/finefoods"))
    ap.add_argument("--fortunes", default="/usr/share/games/fortunes")
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--test-examples", type=int, default=0)
    a = ap.parse_args()

    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.set_num_threads(a.threads)
    tok = AutoTokenizer.from_pretrained(a.model)
    config = json.load(open(os.path.join(a.model, "config.json")))
    labels = [config["id2label"][str(i)] for i in range(len(config["id2label"]))]
    if a.task == "finefoods":
        test = [(t, l) for t, l in pf.read_tsv(os.path.join(a.data, "test.tsv"), "review", "score")]
    else:
        test = [(t, l) for t, l, _ in pf.fortunes_split(a.fortunes)[1]]
    if a.test_examples > 0:
        test = test[: a.test_examples]
    label_id = {l: k for k, l in enumerate(labels)}
    targets = [label_id[l] for _, l in test]

    def batches(rows, size):
        out = []
        for i in range(0, len(rows), size):
            enc = tok([t for t, _ in rows[i : i + size]], truncation=True, max_length=a.max_len, padding=True,
                      return_tensors="pt")
            out.append(enc)
        return out

    big = batches(test, a.batch)
    ones = batches(test[: a.requests], 1)
    fp32 = AutoModelForSequenceClassification.from_pretrained(a.model, torch_dtype=torch.float32).eval()
    int8 = torch.ao.quantization.quantize_dynamic(
        AutoModelForSequenceClassification.from_pretrained(a.model, torch_dtype=torch.float32).eval(),
        {torch.nn.Linear}, dtype=torch.qint8)
    runs = [("fp32", fp32, False), ("bf16", fp32, True), ("int8-dynamic", int8, False)]
    rows = []
    with torch.inference_mode():
        for name, model, bf16 in runs:
            def forward(enc):
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    return model(**enc).logits.float()

            times, correct = [], 0
            for r in range(a.rounds):
                t = 0.0
                preds = []
                for enc in big:
                    t0 = time.perf_counter()
                    z = forward(enc)
                    t += time.perf_counter() - t0
                    preds += z.argmax(-1).tolist()
                times.append(t)
                correct = sum(int(p == y) for p, y in zip(preds, targets))
            for enc in ones[:10]:
                forward(enc)
            ms = []
            for enc in ones:
                t0 = time.perf_counter()
                forward(enc)
                ms.append((time.perf_counter() - t0) * 1e3)
            ms.sort()
            rows.append({"name": name, "test_accuracy": correct / len(test),
                         "throughput_examples_per_s": len(test) / statistics.median(times),
                         "throughput_rounds_s": times,
                         "latency_p50_ms": ms[max(0, -(-len(ms) // 2) - 1)],
                         "latency_p99_ms": ms[max(0, -(-len(ms) * 99 // 100) - 1)]})
            print(json.dumps(rows[-1]), file=sys.stderr)
    print(json.dumps({"torch_version": torch.__version__, "threads": a.threads, "batch": a.batch,
                      "max_len": a.max_len, "test_examples": len(test), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
