// GPT weights in safetensors with GPT-2's tensor names, in the layout Hugging Face's
// GPT2LMHeadModel reads: "transformer.wte.weight", "transformer.h.0.attn.c_attn.weight", ...;
// the four Conv1D weights (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) stored (in, out),
// transposed from mixtrain's (out, in) nn.Linear layout; no lm_head.weight (tied to wte, as
// save_pretrained writes it).
//
// Loading accepts the same files from Hugging Face: names with or without the "transformer."
// prefix (GPT2Model files have none), an lm_head.weight equal to wte, the attn.bias /
// attn.masked_bias mask buffers of older exports (ignored), and any float dtype (converted to
// the model's dtype, rounding to nearest).
#pragma once
#include <string>
#include <string_view>

#include "checkpoint/safetensors.h"
#include "mixtrain/models/gpt.h"

namespace mixtrain {

// The model's parameters in its parameter dtype, as above; metadata "format": "pt" (what
// transformers expects) plus `extra_metadata`. Written durably (file_io.h).
void save_gpt_safetensors(const std::string& path, const Gpt& model,
                          const std::map<std::string, std::string>& extra_metadata = {});
SafetensorsWriter gpt_safetensors_writer(const Gpt& model);
// Any model's named weights (Model::named_weights, views), metadata "format": "pt".
SafetensorsWriter model_safetensors_writer(const Model& model);

// Copies every parameter of `model` from `file`. Errors (one line naming the file and tensor):
// a parameter missing (IoError), a shape that differs from the model's (ShapeError), a dtype
// that is not a float (DTypeError), an unknown tensor name or a duplicate under both prefixes
// (IoError), an lm_head.weight that differs from wte (IoError: untied heads are not supported).
// The model is left unchanged when an error is thrown.
void load_gpt_safetensors(const SafetensorsFile& file, Gpt& model);

// Hugging Face's GPT2Config for `c` as config.json text (model_type gpt2, architectures
// GPT2LMHeadModel, n_positions = block_size, the tanh GELU "gelu_new", dropouts, tied
// embeddings), so transformers' from_pretrained reads a checkpoint directory as it is.
// bos_token_id and eos_token_id: the id of "<|endoftext|>" in `vocab_json` (a tokenizer's
// vocab.json text, GPT-2's end-of-text token) when it has one, else null (GPT2Config's default,
// 50256, would name a token that a byte-level or smaller vocabulary does not have).
std::string gpt2_hf_config_json(const GptConfig& c, std::string_view vocab_json = {});

// A GptConfig read from the shapes in the file (vocab_size, block_size, n_embd, n_layer) and
// n_head / ln_eps given by the caller. IoError when the shapes are missing or inconsistent.
GptConfig infer_gpt_config(const SafetensorsFile& file, int64_t n_head, float ln_eps = 1e-5f);

}  // namespace mixtrain
