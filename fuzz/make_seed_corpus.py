#!/usr/bin/env python3
"""Writes the libFuzzer seed corpus (fuzz/corpus/<target>/): small valid inputs of each format
plus a few near misses. Standard library only. Usage: python3 fuzz/make_seed_corpus.py"""
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def safetensors(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, raw bytes). Same layout as mixtrain's writer."""
    header, off, data = {}, 0, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def bf16(*v):
    return b"".join(struct.pack("<f", x)[2:] for x in v)


def state(kind, dtype, n, extra=None):
    body = {
        "step": 3, "precision": {"F32": "16-mixed", "BF16": "bf16-true"}[dtype],
        "model": {"name": "tiny", "vocab_size": 256, "block_size": 16, "n_layer": 1, "n_head": 2, "n_embd": 16,
                  "dropout": 0.0, "ln_eps": 1e-05},
        "run": {"lr": 0.001, "seed": 1337},
        "optimizer": {"kind": kind, "steps": 2},
        "scaler": {"scale": 32768.0, "growth_tracker": 1, "hysteresis_left": 1, "overflows": 1, "skipped_steps": 1},
        "counters": {"skipped_steps": 1, "overflows": 1, "bad_in_a_row": 0, "hit_min_scale": False, "last_loss": 5.5},
        "rng": {"seed": 1337, "data_position": 3, "stochastic_rounding_counter": 2 * n},
    }
    enc = f32 if dtype == "F32" else bf16
    vals = [0.25 * i for i in range(n)]
    tensors = [("params", dtype, [n], enc(*vals))]
    if kind == "adamw":
        tensors += [("optim.exp_avg", dtype, [n], enc(*vals)), ("optim.exp_avg_sq", dtype, [n], enc(*vals))]
    else:
        tensors += [("optim.momentum_buffer", dtype, [n], enc(*vals))]
    if extra:
        tensors += extra
    meta = {"format": "mixtrain-train-state", "version": "1", "mixtrain": json.dumps(body)}
    return safetensors(tensors, meta)


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


write("safetensors", "empty", safetensors([]))
write("safetensors", "mixed_dtypes", safetensors(
    [("transformer.h.0.attn.c_attn.weight", "F32", [2, 3], f32(*range(6))),
     ("transformer.ln_f.bias", "BF16", [2], bf16(1.0, -2.0)),
     ("ids", "I64", [1], struct.pack("<q", 7)),
     ("zero", "F16", [0, 4], b"")],
    {"format": "pt"}))
write("safetensors", "one_tensor", safetensors([("a", "F32", [1], f32(1.0))]))
write("safetensors", "truncated", safetensors([("a", "F32", [4], f32(1, 2, 3, 4))])[:-3])
write("training_state", "adamw_f32", state("adamw", "F32", 4))
write("training_state", "sgd_bf16", state("sgd", "BF16", 3))
write("training_state", "adamw_bf16_kahan", state("adamw", "BF16", 2, [("optim.compensation", "BF16", [2], bf16(0, 0))]))
write("config", "mixtrain", json.dumps({"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 64, "dropout": 0.1}))
write("config", "hf_gpt2", json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
                                       "n_positions": 1024, "vocab_size": 50257, "layer_norm_epsilon": 1e-05}))
write("config", "bad_type", '{"n_layer": "2"}')
write("config", "nested", '{"n_layer": [1, {"a": null}], "name": "x\\u00e9"}')


# WordPiece vocabularies (vocab.txt: one token a line). bert_sample is a slice of BERT's uncased
# vocabulary (all-MiniLM-L6-v2's vocab.txt, in its order): the specials and a few [unusedN], the
# ASCII characters, every 4th of its other single characters, its first 200 words and pieces, and
# "##" pieces of the letters and digits.
BERT_CHARS = "¡¥©®³·¼×÷ħœɒɛɪɲʀʉʎʔʷʾˡαεινρυωгзмрфшьђљաեկնվքגזךמעצתبجذشظفمىچھअकजतनमवहोঅএগটথপযষিசனராைකවตมวเངབལბვლრᄀᄆᄋ태ᅩᅯᅵᆷᴮᵀᵉᵒᵢᶜ‒‖“‡′⁄⁵⁹₀₄₈₎ₓₘₜ₱ℝ←↔⇒∇∘∨≡⊆─●♠♭ⱼ、《『いかこせっなのへむゆるんイオケスッナヒマモラロー下主事京介会信八分加十原司名国坂士天女宇宣寺山川平弘御志我扌方春書木東楊止氏氷河清版田白相示禾立美艹葉西谷軍郡野長阿青香龸（．～"
BERT_WORDS = ("the of and in to was he is as for on with that it his by at from her ##s she you had an were but be "
              "this are not my they one which or have him me first all also their has up who out been when after "
              "there into new two its ##a time would no what about said we over then other so more ##e can if like "
              "back them only some could ##i where just ##ing during before ##n do ##o made school through than now"
              " years most world may between down well three ##d year while will ##ed ##r ##y later ##t city under "
              "around did such being used state people part know against your many second university both national "
              "##er these don known off way until re how even get head ... didn ##ly team american because de ##l "
              "born united film since still long work south us became any high again day family see right man eyes "
              "house season war states including took life north same each called name much place however go four "
              "group another found won area here going 10 away series left home music best make hand number company"
              " several")


def vocab(tokens, eol="\n"):
    return "".join(t + eol for t in tokens)


SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
write("vocab", "bert_sample", vocab(dict.fromkeys(  # in order, without the pieces BERT_WORDS has
    ["[PAD]"] + ["[unused%d]" % i for i in range(4)] + SPECIALS[1:] + [chr(c) for c in range(33, 127)] +
    list(BERT_CHARS) + BERT_WORDS.split() + ["##" + c for c in "0123456789abcdefghijklmnopqrstuvwxyz"] +
    ["##" + c for c in BERT_CHARS[::6]])))
write("vocab", "specials_only", vocab(SPECIALS))
# Hugging Face trims each line's end: CRLF, trailing blanks, no newline after the last token; the
# specials need not come first; precomposed and decomposed accents, CJK.
write("vocab", "crlf_trailing_blanks", vocab(
    ["un", "##aff", "##able", "[SEP] ", "[CLS]\t", "[UNK]", "[PAD]", "caf", "##\u00e9", "##e", "na\u00efve",
     "e\u0301", "\u4e2d", "\u6587", ",", "!"], "\r\n")[:-2])
write("vocab", "duplicate_after_trim", vocab(SPECIALS + ["ab", "ab \t"]))
write("vocab", "no_unk", vocab(["[PAD]", "[CLS]", "[SEP]", "a"]))
write("vocab", "bad_utf8", vocab(SPECIALS).encode() + b"\xc3\x28\n")
write("vocab", "empty_line", vocab(SPECIALS[:2] + [""] + SPECIALS[2:]))

# Encoder config.json (Hugging Face's BertConfig / DistilBertConfig, as transformers writes it).
MINILM = {"_name_or_path": "nreimers/MiniLM-L6-H384-uncased", "architectures": ["BertModel"],
          "attention_probs_dropout_prob": 0.1, "gradient_checkpointing": False, "hidden_act": "gelu",
          "hidden_dropout_prob": 0.1, "hidden_size": 384, "initializer_range": 0.02, "intermediate_size": 1536,
          "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "bert", "num_attention_heads": 12,
          "num_hidden_layers": 6, "pad_token_id": 0, "position_embedding_type": "absolute",
          "transformers_version": "4.8.2", "type_vocab_size": 2, "use_cache": True, "vocab_size": 30522}
DISTILBERT = {"activation": "gelu", "architectures": ["DistilBertForMaskedLM"], "attention_dropout": 0.1,
              "dim": 768, "dropout": 0.1, "hidden_dim": 3072, "initializer_range": 0.02,
              "max_position_embeddings": 512, "model_type": "distilbert", "n_heads": 12, "n_layers": 6,
              "pad_token_id": 0, "qa_dropout": 0.1, "seq_classif_dropout": 0.2, "sinusoidal_pos_embds": False,
              "tie_weights_": True, "transformers_version": "4.10.0.dev0", "vocab_size": 30522}
# Small enough (a few thousand encoder parameters) for the fuzzer to build the model and read back
# the config.json it saves; with id2label, label2id and mixtrain_pooling as finetune --save writes them.
TINY_BERT = dict(MINILM, architectures=["BertForSequenceClassification"], hidden_size=8, intermediate_size=16,
                 max_position_embeddings=32, num_attention_heads=2, num_hidden_layers=2, vocab_size=64,
                 id2label={"0": "neg", "1": "pos"}, label2id={"neg": 0, "pos": 1}, num_labels=2,
                 mixtrain_pooling="mean")
TINY_DISTILBERT = dict(DISTILBERT, architectures=["DistilBertForSequenceClassification"], dim=4, hidden_dim=8,
                       max_position_embeddings=16, n_heads=2, n_layers=1, vocab_size=16, pad_token_id=3,
                       sinusoidal_pos_embds=True, id2label={"0": "a", "1": "b", "2": "c"})


def config(d):
    return json.dumps(d, indent=2, sort_keys=True) + "\n"


write("encoder_config", "minilm", config(MINILM))
write("encoder_config", "distilbert", config(DISTILBERT))
write("encoder_config", "tiny_bert_saved", config(TINY_BERT))
write("encoder_config", "tiny_distilbert_sinusoidal", config(TINY_DISTILBERT))
write("encoder_config", "relu", config(dict(TINY_BERT, hidden_act="relu")))
write("encoder_config", "not_divisible", config(dict(TINY_BERT, hidden_size=10, num_attention_heads=4)))
write("encoder_config", "bad_id2label", config(dict(TINY_BERT, id2label={"0": "neg", "2": "pos"})))
