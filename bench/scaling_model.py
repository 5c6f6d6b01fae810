#!/usr/bin/env python3
"""Predicted data-parallel step time and efficiency (an alpha-beta model of ring all-reduce).

Weak scaling, as `mpirun -np N mixtrain train` runs: every rank computes one step's micro-batches
in `compute` seconds, then the gradient (P parameters x bytes per element) is summed over N ranks
in buckets of `bucket` bytes by ring all-reduce, whose time per bucket of n bytes is

    t(n) = 2 (N - 1) alpha + 2 (N - 1) / N * n / bandwidth            (reduce-scatter + all-gather)

(Thakur, Rabenseifner & Gropp 2005; alpha: per-message latency, bandwidth: link bytes per second).
ZeRO (--zero 1|2|3): the gradients are reduce-scattered, half of that per bucket; stages 1 and 2
all-gather the updated weights after the step (P x weight bytes, not overlapped); stage 3 instead
gathers every block's weights before its forward and again before its backward (2 x P x the
gathered bytes per element: 6 in the *-mixed modes, fp32 masters and the 16-bit copy; 4 in
32-true; 2 in the *-true modes), one all-gather of (N - 1) alpha + (N - 1) / N * n / bandwidth per
unit (the blocks and the rest), not overlapped (mixtrain does not prefetch). int8 gradient sums
(--grad-bytes 1.002) send a quarter of fp32's.
Without overlap the step is compute + sum of t over buckets. With overlap (buckets start from the
backward callback, as mixtrain and PyTorch DDP do) a bucket's sum may run during the rest of the
backward pass: step = compute + max(t(last bucket), sum of t - backward_share * compute), where
backward_share is the part of compute that is backward (about 2/3 for a transformer). bf16 sums send
half the bytes. Efficiency = compute / step.

  bench/scaling_model.py --model gpt2-small --compute-s 0.35          # a table for a given compute time
  bench/scaling_model.py --model gpt2-small --compute-s 0.35 --zero-table --units 13   # ZeRO-1 against ZeRO-3
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


def ring_half_s(nbytes, ranks, alpha, bandwidth):  # a reduce-scatter or an all-gather alone
    if ranks == 1:
        return 0.0
    return (ranks - 1) * alpha + (ranks - 1) / ranks * nbytes / bandwidth


def step_s(params, ranks, compute, alpha, bandwidth, elem_bytes, bucket_bytes, overlap, backward_share,
           zero=0, weight_bytes=4, gather_bytes=6, units=1):
    total = params * elem_bytes
    sizes = [bucket_bytes] * int(total // bucket_bytes)
    if total % bucket_bytes:
        sizes.append(total % bucket_bytes)
    per = ring_allreduce_s if zero == 0 else ring_half_s
    times = [per(n, ranks, alpha, bandwidth) for n in sizes]
    comm = sum(times)
    after = 0.0  # not overlapped with compute
    if zero in (1, 2):
        after = ring_half_s(params * weight_bytes, ranks, alpha, bandwidth)
    elif zero == 3:
        after = 2 * units * ring_half_s(params * gather_bytes / units, ranks, alpha, bandwidth)
    if not overlap:
        return compute + comm + after
    return compute + max(times[-1] if times else 0.0, comm - backward_share * compute) + after


def gathered_bytes(params, ranks, gather_bytes):
    """ZeRO-3: the parameter bytes a rank receives per step (forward and backward)."""
    return 2 * params * gather_bytes * (ranks - 1) / ranks


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


def zero_table(args, params, compute):
    links = [25, 100, 400]
    out = [f"P = {params / 1e6:.1f} M parameters, compute {compute * 1e3:.1f} ms per step per rank, "
           f"alpha {args.alpha_us:g} us, buckets {args.bucket_mb:g} MiB, {args.units} gather units, "
           f"{args.gather_bytes:g} bytes per parameter gathered; efficiency compute / step with overlap",
           "",
           "| ranks | " + " | ".join(f"{g} Gb/s: zero 1 / zero 3 / zero 3 int8 sums" for g in links) + " |",
           "|---|" + "---|" * len(links)]
    for n in [2, 4, 8, 16, 32, 64]:
        cells = []
        for g in links:
            common = dict(params=params, ranks=n, compute=compute, alpha=args.alpha_us * 1e-6, bandwidth=g * 1e9 / 8,
                          bucket_bytes=args.bucket_mb * 2**20, overlap=True, backward_share=args.backward_share,
                          gather_bytes=args.gather_bytes, units=args.units)
            e = [compute / step_s(elem_bytes=4, zero=1, **common), compute / step_s(elem_bytes=4, zero=3, **common),
                 compute / step_s(elem_bytes=1.002, zero=3, **common)]
            cells.append(" / ".join(f"{x:.2f}" for x in e))
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def table(args, params, compute):
    if args.zero_table:
        return zero_table(args, params, compute)
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
    zero = two.get("zero", 0)
    grad_bytes = args.grad_bytes or (2 if args.bf16 else 4)
    if zero == 3:
        pred_bytes = gathered_bytes(params, 2, args.gather_bytes)
        got = two.get("param_gather_bytes_per_step", float("nan"))
        print(f"2 ranks, zero 3: parameter bytes received per step predicted {pred_bytes:.0f}, measured {got:.0f}")
    for overlap in (False, True):
        pred = step_s(params, 2, compute, args.alpha_us * 1e-6, bw, grad_bytes, args.bucket_mb * 2**20, overlap,
                      args.backward_share, zero=zero, gather_bytes=args.gather_bytes, units=args.units)
        print(f"2 ranks, zero {zero}, overlap {overlap}: predicted {pred * 1e3:.2f} ms per step, measured "
              f"{measured * 1e3:.2f} ms ({pred / measured:.3f}x; compute per rank {compute * 1e3:.2f} ms; measured "
              f"wait for the sums {two.get('reduce_wait_s_per_step', float('nan')) * 1e3:.2f} ms per step, "
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
    p.add_argument("--grad-bytes", type=float, default=0,
                   help="bytes per gradient element sent (4 fp32, 2 bf16, 1.002 int8 with its scales)")
    p.add_argument("--gather-bytes", type=float, default=6,
                   help="ZeRO-3: bytes per parameter gathered (6 *-mixed, 4 32-true, 2 *-true)")
    p.add_argument("--units", type=int, default=7, help="ZeRO-3: gather units (blocks + 1; gpt-mini: 7)")
    p.add_argument("--zero-table", action="store_true", help="the table of ZeRO stage 1 against stage 3")
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
