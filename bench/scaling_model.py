#!/usr/bin/env python3
"""Predicted data-parallel step time and efficiency (an alpha-beta model of ring all-reduce).

Weak scaling, as `mpirun -np N mixtrain train` runs: every rank computes one step's micro-batches
in `compute` seconds, then the gradient (P parameters x bytes per element) is summed over N ranks
in buckets of `bucket` bytes by ring all-reduce, whose time per bucket of n bytes is

    t(n) = 2 (N - 1) alpha + 2 (N - 1) / N * n / bandwidth            (reduce-scatter + all-gather)

(Thakur, Rabenseifner & Gropp 2005; alpha: per-message latency, bandwidth: link bytes per second).
Without overlap the step is compute + sum of t over buckets. With overlap (buckets start from the
backward callback, as mixtrain and PyTorch DDP do) a bucket's sum may run during the rest of the
backward pass: step = compute + max(t(last bucket), sum of t - backward_share * compute), where
backward_share is the part of compute that is backward (about 2/3 for a transformer). bf16 sums send
half the bytes. Efficiency = compute / step.

  bench/scaling_model.py --model gpt2-small --compute-s 0.35          # a table for a given compute time
  bench/scaling_model.py --model gpt-mini --measure build/mixtrain     # compute measured with `bench train`
  bench/scaling_model.py --check-two-rank ONE_RANK.json TWO_RANKS.json --tokens-per-step 4096 --gbps 40
      # the model against measured runs (`train --json` summaries): one process as one rank
      # (same threads, batch and --grad-accum as each rank; tokens per step = one rank's), and 2 ranks
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

PRESETS = {  # n_layer, n_embd, block_size, vocab_size (src/models/gpt.cpp)
    "gpt-nano": (4, 128, 128, 256),
    "gpt-mini": (6, 384, 256, 256),
    "gpt2-small": (12, 768, 1024, 50257),
}


def bert_params(n_layer, c, inter, v, t, types=2):
    # embeddings (word, position, type, LN) + per layer (qkv, out, LN, intermediate, output, LN) + pooler
    emb = v * c + t * c + types * c + 2 * c
    layer = 3 * (c * c + c) + (c * c + c) + 2 * c + (c * inter + inter) + (inter * c + c) + 2 * c
    return emb + n_layer * layer + (c * c + c)


ENCODERS = {"minilm-l6": bert_params(6, 384, 1536, 30522, 512)}  # the fine-tune's encoder (all-MiniLM-L6-v2)


def gpt_params(n_layer, c, t, v):
    # wte (tied lm_head) + wpe + per block (ln 2C, qkv 3C^2+3C, proj C^2+C, ln 2C, fc 4C^2+4C, proj 4C^2+C) + ln_f
    return v * c + t * c + n_layer * (12 * c * c + 13 * c) + 2 * c


def ring_allreduce_s(nbytes, ranks, alpha, bandwidth):
    if ranks == 1:
        return 0.0
    return 2 * (ranks - 1) * alpha + 2 * (ranks - 1) / ranks * nbytes / bandwidth


def step_s(params, ranks, compute, alpha, bandwidth, elem_bytes, bucket_bytes, overlap, backward_share):
    total = params * elem_bytes
    sizes = [bucket_bytes] * int(total // bucket_bytes)
    if total % bucket_bytes:
        sizes.append(total % bucket_bytes)
    times = [ring_allreduce_s(n, ranks, alpha, bandwidth) for n in sizes]
    comm = sum(times)
    if not overlap:
        return compute + comm
    return compute + max(times[-1] if times else 0.0, comm - backward_share * compute)


def measure_compute(mixtrain, model, precision, batch, seq):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.json")
        cmd = [mixtrain, "bench", "train", "--model", model, "--precision", precision, "--batch-size", str(batch),
               "--steps", "4", "--profile-warmup", "1", "--json", path]
        if seq:
            cmd += ["--seq-len", str(seq)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        s = json.load(open(path))
    run = s["runs"][0] if "runs" in s else s
    tokens = batch * (seq or PRESETS[model][2])
    return tokens / run["tokens_per_s"]


def table(args, params, compute):
    links = [25, 100, 400]
    out = [f"P = {params / 1e6:.1f} M parameters, compute {compute * 1e3:.1f} ms per step per rank, "
           f"alpha {args.alpha_us:g} us, buckets {args.bucket_mb:g} MiB, backward {args.backward_share:.2f} of compute",
           "",
           "| ranks | " + " | ".join(f"{g} Gb/s: fp32 / overlap / overlap+bf16" for g in links) + " |",
           "|---|" + "---|" * len(links)]
    ranks = [2, 4, 8, 16, 32, 64, 128, 256, 512]
    for n in ranks:
        cells = []
        for g in links:
            bw = g * 1e9 / 8
            common = dict(params=params, ranks=n, compute=compute, alpha=args.alpha_us * 1e-6, bandwidth=bw,
                          bucket_bytes=args.bucket_mb * 2**20, backward_share=args.backward_share)
            e = [compute / step_s(elem_bytes=4, overlap=False, **common),
                 compute / step_s(elem_bytes=4, overlap=True, **common),
                 compute / step_s(elem_bytes=2, overlap=True, **common)]
            cells.append(" / ".join(f"{x:.2f}" for x in e))
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def check_two_rank(args):
    one, two = (json.load(open(p)) for p in args.check_two_rank)
    if two.get("ranks") != 2:
        sys.exit(f"{args.check_two_rank[1]}: not a 2-rank summary (no \"ranks\": 2)")
    params = two["parameters"]
    # The one-rank run (one process, the same threads and --grad-accum as each rank) is one rank's compute.
    compute = args.tokens_per_step / one["tokens_per_s"]
    measured = 2 * args.tokens_per_step / two["tokens_per_s"]
    bw = args.gbps * 1e9 / 8
    for overlap in (False, True):
        pred = step_s(params, 2, compute, args.alpha_us * 1e-6, bw, 2 if args.bf16 else 4,
                      args.bucket_mb * 2**20, overlap, args.backward_share)
        print(f"2 ranks, overlap {overlap}: predicted {pred * 1e3:.2f} ms per step, measured {measured * 1e3:.2f} ms "
              f"(compute per rank {compute * 1e3:.2f} ms; measured wait for the sums "
              f"{two.get('reduce_wait_s_per_step', float('nan')) * 1e3:.2f} ms per step, "
              f"{100 * two.get('buckets_overlapped', 0):.0f}% of buckets started during backward)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gpt2-small", help="gpt-nano, gpt-mini, gpt2-small or minilm-l6")
    p.add_argument("--compute-s", type=float, help="measured compute seconds per step per rank")
    p.add_argument("--measure", metavar="MIXTRAIN", help="measure the compute time with `MIXTRAIN bench train`")
    p.add_argument("--precision", default="bf16-mixed")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=0)
    p.add_argument("--alpha-us", type=float, default=10.0, help="per-message latency (us)")
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--backward-share", type=float, default=2 / 3)
    p.add_argument("--check-two-rank", nargs=2, metavar=("ONE_RANK_JSON", "TWO_RANKS_JSON"))
    p.add_argument("--tokens-per-step", type=int, help="with --check-two-rank: one rank's tokens per optimizer step")
    p.add_argument("--gbps", type=float, default=40.0, help="with --check-two-rank: the link (shared memory: measure it)")
    p.add_argument("--bf16", action="store_true", help="with --check-two-rank: the 2-rank run used bf16 sums")
    args = p.parse_args()
    if args.check_two_rank:
        if not args.tokens_per_step:
            sys.exit("--check-two-rank needs --tokens-per-step")
        check_two_rank(args)
        return
    params = ENCODERS.get(args.model) or gpt_params(*PRESETS[args.model])
    if args.compute_s is None and args.measure is None:
        sys.exit("give --compute-s (seconds per step per rank) or --measure MIXTRAIN")
    compute = args.compute_s if args.compute_s is not None else measure_compute(
        args.measure, args.model, args.precision, args.batch_size, args.seq_len)
    print(table(args, params, compute))


if __name__ == "__main__":
    main()
