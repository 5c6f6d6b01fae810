#!/usr/bin/env python3
"""PyTorch + transformers on the same machine, the same fine-tune: the peer of `mixtrain finetune`.

The same weights (the MiniLM directory), the same data (Fine Foods TSVs, or the fortunes topic
task split exactly as mixtrain's fortunes_topic_task: a Fisher-Yates shuffle driven by the same
counter-based RNG), the same tokenization (AutoTokenizer.from_pretrained(dir): in transformers 5,
BertTokenizerFast(vocab_file=...) silently builds a 5-token vocabulary), max length, batch size,
AdamW (weight decay on matrices only, betas 0.9 / 0.999, eps 1e-8, gradient clipping at 1.0),
Hugging Face's linear warm-up / linear decay schedule, dynamic padding, epochs and threads; the
classification head of AutoModelForSequenceClassification (BERT's pooler on [CLS], mixtrain's
--pooling cls). Runs fp32 ("32-true") and torch.autocast(bf16) ("bf16-mixed"), evaluating the
whole test set after each epoch, and prints accuracy and non-pad tokens/s per run.

Before training it checks that its token ids are mixtrain's: the first --check-batches test
batches are compared, row by row, with tests/fixtures/wordpiece_ids.txt.xz (Hugging Face ids that
tests/data/wordpiece_fixture_test.cpp checks mixtrain's tokenizer against, id for id), cut to
max length the way both truncate. A mismatch stops the script.

Step for step against mixtrain (bench/RESULTS.md, "Fortunes, step for step"): --order mixtrain
takes mixtrain's counter-based epoch order, --dropout-rng mixtrain its dropout masks (the same
stream, offsets and scale, the attention's through transformers' eager path), --dropout P sets
every dropout, --save-init DIR writes the model as initialised (the new head included) for
`mixtrain finetune --model DIR`, and --log-steps FILE writes each step's loss, gradient norm and lr
as mixtrain's --log-jsonl does. Then the fp32 runs of both agree to rounding.

A development tool: no build, test or CI step runs it (tools/setup_dev_venv.sh makes the venv).

    python bench/peer_finetune.py --task finefoods --epochs 1 --batch-size 16 --max-len 128 \\
        --lr 5e-5 --threads 2 [--precisions 32-true,bf16-mixed] [--json FILE]
    mixtrain --threads 2 finetune --task finefoods --epochs 1 --batch-size 16 --max-len 128 --lr 5e-5

Prints one JSON object: {"torch_version", "transformers_version", "threads", "config",
"majority_baseline", "runs": [{"precision", "test_accuracy", "test_loss", "epochs": [...],
"train_seconds", "tokens_per_s"}]}.
"""

import argparse
import json
import lzma
import math
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOPICS = ["computers", "food", "love", "politics", "science", "sports", "startrek", "medicine", "law", "pets",
          "linux", "education"]
MASK64 = (1 << 64) - 1


# --- mixtrain's counter-based RNG (include/mixtrain/numeric/stochastic.h) -----------------------
def splitmix64_mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


GOLDEN = 0x9E3779B97F4A7C15


def counter_rng(seed, counter):
    key = splitmix64_mix((seed + GOLDEN) & MASK64)
    return splitmix64_mix((key + ((counter + 1) * GOLDEN)) & MASK64) >> 32


# --- data, as src/data/text_classification.cpp reads it -----------------------------------------
def read_tsv(path, text_col, label_col):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    header = lines[0].rstrip("\r").split("\t")
    t, l = header.index(text_col), header.index(label_col)
    rows = []
    for line in lines[1:]:
        line = line[:-1] if line.endswith("\r") else line
        if line.strip(" \t\r") == "":
            continue
        fields = line.split("\t")
        rows.append((fields[t], fields[l]))
    return rows


def fortunes_entries(d):
    """(text, topic, index) in fortunes_topic_entries' order (same rules as the fixture's script)."""
    out = []
    for topic in TOPICS:
        with open(os.path.join(d, topic), "rb") as f:
            lines = f.read().decode("utf-8").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        entry = []

        def finish():
            text = "".join(entry).strip(" \t\r\n")
            if len(text.encode("utf-8")) > 20:
                out.append((text, topic))

        for line in lines:
            line = line[:-1] if line.endswith("\r") else line
            if line == "%":
                finish()
                entry = []
            else:
                entry.append(line + "\n")
        finish()
    return out


def fortunes_split(d, seed=0, test_fraction=0.2):
    """fortunes_topic_task: train and test as (text, label, entry index), each in file order."""
    entries = fortunes_entries(d)
    n = len(entries)
    order = list(range(n))
    for i in range(n, 1, -1):
        r = (counter_rng(seed, 2 * i) << 32) | counter_rng(seed, 2 * i + 1)
        j = r % i
        order[i - 1], order[j] = order[j], order[i - 1]
    n_test = int(math.floor(test_fraction * n + 0.5))
    is_test = [False] * n
    for k in range(n_test):
        is_test[order[k]] = True
    train = [(t, l, i) for i, (t, l) in enumerate(entries) if not is_test[i]]
    test = [(t, l, i) for i, (t, l) in enumerate(entries) if is_test[i]]
    return train, test


class MixtrainDropoutStream:
    """mixtrain's dropout masks (nn::DropoutState, CpuBackend::dropout_mask): element i of a
    forward's k-th dropout is kept iff counter_rng(seed, offset + i) >= uint64(double(p) * 2^32),
    where offset counts the elements of the forward's earlier dropouts and seed = run seed ^
    (batch position << 20); kept elements are scaled by float(1) / (float(1) - float(p)).
    The forward's dropouts come in mixtrain's order, which is Hugging Face BERT's: embeddings,
    then per layer attention probabilities, attention output, FFN output; then the pooled output."""

    def __init__(self):
        import numpy as np
        self.np = np
        self.seed, self.offset = 0, 0

    def start(self, run_seed, position):
        self.seed = (run_seed ^ (position << 20)) & MASK64
        self.offset = 0

    def apply(self, x, p):
        import torch
        np = self.np
        n = x.numel()
        key = np.uint64(splitmix64_mix((self.seed + GOLDEN) & MASK64))
        c = np.arange(self.offset + 1, self.offset + 1 + n, dtype=np.uint64)  # counter + 1
        z = key + c * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = (z ^ (z >> np.uint64(31))) >> np.uint64(32)
        threshold = np.uint64(int(float(np.float32(p)) * 4294967296.0))
        keep = torch.from_numpy(z >= threshold).view(x.shape)
        self.offset += n
        scale = float(np.float32(1.0) / (np.float32(1.0) - np.float32(p)))
        return torch.where(keep, x * scale, torch.zeros((), dtype=x.dtype))


def use_mixtrain_dropout(model, stream):
    """Every dropout of a BertForSequenceClassification draws mixtrain's masks from `stream`."""
    import torch
    import transformers.models.bert.modeling_bert as modeling_bert

    class Drop(torch.nn.Module):
        def __init__(self, p):
            super().__init__()
            self.p = p

        def forward(self, x):
            return stream.apply(x, self.p) if self.training and self.p > 0 else x

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        # transformers' eager_attention_forward with the probabilities' dropout replaced.
        if scaling is None:
            scaling = query.size(-1) ** -0.5
        w = torch.matmul(query, key.transpose(2, 3)) * scaling
        if attention_mask is not None:
            w = w + attention_mask
        w = torch.nn.functional.softmax(w, dim=-1)
        if module.training and dropout > 0:
            w = stream.apply(w, dropout)
        out = torch.matmul(w, value).transpose(1, 2).contiguous()
        return out, w

    # The eager path with this function in its place: a newly registered attention implementation
    # would be handed no padding mask (transformers builds the additive mask for "eager" only).
    modeling_bert.eager_attention_forward = attention
    model.config._attn_implementation = "eager"
    for name, m in list(model.named_modules()):
        for child_name, child in list(m.named_children()):
            if isinstance(child, torch.nn.Dropout) and not name.endswith("attention.self"):
                setattr(m, child_name, Drop(child.p))


def mixtrain_epoch_order(seed, epoch, n):
    """ClassificationBatches::epoch_order: a Fisher-Yates shuffle from the epoch's stream."""
    s = (seed ^ splitmix64_mix((epoch + 0x5EED5EED) & MASK64)) & MASK64
    order = list(range(n))
    for i in range(n, 1, -1):
        r = (counter_rng(s, 2 * i) << 32) | counter_rng(s, 2 * i + 1)
        j = r % i
        order[i - 1], order[j] = order[j], order[i - 1]
    return order


def fixture_sections():
    path = os.path.join(REPO, "tests/fixtures/wordpiece_ids.txt.xz")
    sections, cur = {}, None
    with lzma.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.startswith("section "):
                name = line.split()[1]
                cur = sections.setdefault(name, []) if name in ("finefoods/test.tsv", "fortunes") else None
            elif cur is not None:
                cur.append([int(x) for x in line.split()[1:]])
    return sections


def check_ids(tok, test, fixture_rows, max_len, batch_size, batches):
    """The peer's padded test batches against the fixture's ids cut to max_len ([CLS] a [SEP])."""
    rows = 0
    for b in range(batches):
        chunk = test[b * batch_size:(b + 1) * batch_size]
        if not chunk:
            break
        enc = tok([t for t, _, _ in chunk], truncation=True, max_length=max_len, padding="longest")
        width = len(enc["input_ids"][0])
        for (text, _, index), ids, mask in zip(chunk, enc["input_ids"], enc["attention_mask"]):
            want = fixture_rows[index]
            if len(want) > max_len:
                want = want[:max_len - 1] + [want[-1]]  # drop a's tail, keep [SEP]
            want = want + [tok.pad_token_id] * (width - len(want))
            if ids != want:
                sys.exit(f"peer_finetune: token ids differ from mixtrain's fixture for {text[:60]!r}:\n"
                         f"  peer    {ids[:20]}...\n  fixture {want[:20]}...")
            if sum(mask) != sum(1 for x in ids if x != tok.pad_token_id):
                sys.exit("peer_finetune: attention mask disagrees with the padding")
            rows += 1
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(REPO, "data/models/all-minilm-l6-v2"))
    ap.add_argument("--task", choices=["finefoods", "fortunes"], default="finefoods")
    ap.add_argument("--data", default=os.path.join(REPO, "data/finefoods"))
    ap.add_argument("--fortunes", default="/usr/share/games/fortunes")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--train-examples", type=int, default=0, help="the first N only (0: all), as mixtrain's flag")
    ap.add_argument("--test-examples", type=int, default=0)
    ap.add_argument("--precisions", default="32-true,bf16-mixed")
    ap.add_argument("--check-batches", type=int, default=4, help="test batches whose ids are checked")
    ap.add_argument("--check-only", action="store_true", help="check the ids and stop")
    ap.add_argument("--json", help="also write the result to FILE")
    ap.add_argument("--dropout", type=float, default=None,
                    help="every dropout of the encoder and the head (default: the config's), as mixtrain's flag")
    ap.add_argument("--order", choices=["torch", "mixtrain"], default="torch",
                    help="batch order: torch.randperm, or mixtrain's counter-based epoch order for the same --seed")
    ap.add_argument("--save-init", metavar="DIR",
                    help="save the model as initialised (the new head included) to DIR with the tokenizer files, "
                         "for `mixtrain finetune --model DIR` to start from the same head")
    ap.add_argument("--log-steps", metavar="FILE", help="write one JSON line per step: loss, grad norm, lr")
    ap.add_argument("--dropout-rng", choices=["torch", "mixtrain"], default="torch",
                    help="dropout masks from torch's generator, or mixtrain's counter-based stream for the same --seed")
    a = ap.parse_args()

    import transformers
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(a.model)
    if len(tok) < 1000:
        sys.exit(f"peer_finetune: the tokenizer has {len(tok)} tokens: not the model's vocabulary")

    fixture = fixture_sections()
    if a.task == "finefoods":
        train = [(t, l, i) for i, (t, l) in enumerate(read_tsv(os.path.join(a.data, "train.tsv"), "review", "score"))]
        test = [(t, l, i) for i, (t, l) in enumerate(read_tsv(os.path.join(a.data, "test.tsv"), "review", "score"))]
        test_rows = fixture["finefoods/test.tsv"]
    else:
        train, test = fortunes_split(a.fortunes)
        test_rows = fixture["fortunes"]
    if a.train_examples > 0:
        train = train[:a.train_examples]
    if a.test_examples > 0:
        test = test[:a.test_examples]
    # mixtrain's label ids: the fortunes topics in their fixed order, or the sorted label names.
    labels = list(TOPICS) if a.task == "fortunes" else sorted({l for _, l, _ in train})
    label_id = {l: k for k, l in enumerate(labels)}
    checked = check_ids(tok, test, test_rows, a.max_len, a.batch_size, a.check_batches)
    print(f"peer_finetune: ids of {checked} test rows equal mixtrain's fixture", file=sys.stderr)
    if a.check_only:
        return

    import torch
    from transformers import AutoModelForSequenceClassification, get_linear_schedule_with_warmup

    torch.set_num_threads(a.threads)

    counts = [sum(1 for _, l, _ in test if l == name) for name in labels]
    majority = max(counts) / len(test)

    def batches(rows, order):
        for first in range(0, len(order), a.batch_size):
            chunk = [rows[k] for k in order[first:first + a.batch_size]]
            enc = tok([t for t, _, _ in chunk], truncation=True, max_length=a.max_len, padding="longest",
                      return_tensors="pt")
            enc["labels"] = torch.tensor([label_id[l] for _, l, _ in chunk])
            yield enc

    runs = []
    for precision in a.precisions.split(","):
        torch.manual_seed(a.seed)
        extra = {} if a.dropout is None else {"hidden_dropout_prob": a.dropout,
                                               "attention_probs_dropout_prob": a.dropout,
                                               "classifier_dropout": a.dropout}
        model = AutoModelForSequenceClassification.from_pretrained(
            a.model, num_labels=len(labels), id2label=dict(enumerate(labels)), label2id=label_id, **extra)
        if a.save_init:
            import shutil
            model.save_pretrained(a.save_init)
            for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
                if os.path.exists(os.path.join(a.model, name)):
                    shutil.copy(os.path.join(a.model, name), a.save_init)
        step_log = open(a.log_steps, "w") if a.log_steps else None
        stream = None
        if a.dropout_rng == "mixtrain":
            stream = MixtrainDropoutStream()
            use_mixtrain_dropout(model, stream)
        decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
        no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                                 {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.999), eps=1e-8)
        steps_per_epoch = (len(train) + a.batch_size - 1) // a.batch_size
        sched = get_linear_schedule_with_warmup(opt, a.warmup, steps_per_epoch * a.epochs)
        autocast = precision == "bf16-mixed"
        gen = torch.Generator().manual_seed(a.seed)
        train_s, tokens, epochs = 0.0, 0, []
        for epoch in range(a.epochs):
            model.train()
            order = (mixtrain_epoch_order(a.seed, epoch, len(train)) if a.order == "mixtrain"
                     else torch.randperm(len(train), generator=gen).tolist())
            losses = []
            for batch in batches(train, order):
                t0 = time.perf_counter()
                if stream:
                    stream.start(a.seed, epoch * steps_per_epoch + len(losses) + 1)
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    out = model(**batch)
                out.loss.backward()
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                lr = sched.get_last_lr()[0]
                opt.step()
                sched.step()
                opt.zero_grad(set_to_none=True)
                train_s += time.perf_counter() - t0
                tokens += int(batch["attention_mask"].sum())
                losses.append(float(out.loss))
                if step_log:
                    step_log.write(json.dumps({"step": len(losses) + epoch * steps_per_epoch, "loss": float(out.loss),
                                               "grad_norm": float(norm), "lr": lr}) + "\n")
            model.eval()
            correct, loss_sum = 0, 0.0
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                for batch in batches(test, list(range(len(test)))):
                    out = model(**batch)
                    correct += int((out.logits.argmax(-1) == batch["labels"]).sum())
                    loss_sum += float(out.loss) * len(batch["labels"])
            epochs.append({"epoch": epoch + 1, "train_loss": sum(losses) / len(losses),
                           "test_loss": loss_sum / len(test), "test_accuracy": correct / len(test)})
            print(f"{precision} epoch {epoch + 1}: test accuracy {100 * correct / len(test):.2f}% "
                  f"(majority {100 * majority:.2f}%), {tokens / train_s:.0f} non-pad tokens/s", file=sys.stderr)
        if step_log:
            step_log.close()
        runs.append({"precision": precision, "test_accuracy": epochs[-1]["test_accuracy"],
                     "test_loss": epochs[-1]["test_loss"], "epochs": epochs, "train_seconds": train_s,
                     "tokens_per_s": tokens / train_s})

    result = {"torch_version": torch.__version__, "transformers_version": transformers.__version__,
              "threads": a.threads, "config": {k: v for k, v in vars(a).items() if k not in ("json",)},
              "majority_baseline": majority, "ids_checked_rows": checked, "runs": runs}
    text = json.dumps(result, indent=2)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
