// `mixtrain sample`: generates text from a checkpoint (or a GPT-2 layout safetensors file).
// Tokens are bytes, or the ids of a BPE tokenizer: the checkpoint's own (a run with --tokenizer
// saves vocab.json and merges.txt in each checkpoint), the one beside a .safetensors file (a
// Hugging Face model directory), or --tokenizer DIR; the prompt is encoded with it and every
// generated token printed as its text. Without a tokenizer, ids past 255 print as <|id|>.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "commands.h"
#include "mixtrain/amp/autocast.h"
#include "mixtrain/autograd/variable.h"
#include "mixtrain/checkpoint/load_model.h"
#include "mixtrain/data/bpe_tokenizer.h"
#include "mixtrain/models/generate.h"

namespace mixtrain::cli {
namespace {

// {"tokens": [...], "logits": [[V floats] per prompt position]} of one forward pass.
void write_logits(Gpt& model, const std::vector<int32_t>& prompt, const std::string& path) {
  const int64_t T = static_cast<int64_t>(prompt.size());
  if (T > model.config().block_size)
    throw ArgumentError("--logits-json: the prompt has " + std::to_string(T) +
                        " tokens, more than block_size " + std::to_string(model.config().block_size));
  autograd::NoGradGuard no_grad;
  const Tensor logits =
      model.forward(Tensor::from_ints(prompt, {1, T}), nullptr).logits.value();  // (1, T, V)
  nlohmann::json j;
  j["tokens"] = prompt;
  j["logits"] = nlohmann::json::array();
  for (int64_t t = 0; t < T; ++t) j["logits"].push_back(logits.select(1, t).contiguous().to_floats());
  write_file_atomic(path, j.dump() + "\n");
}

// The tokenizer of a loaded model: --tokenizer DIR, else the tokenizer files in the checkpoint
// directory (or beside the .safetensors file), else none (bytes).
std::optional<BpeTokenizer> sample_tokenizer(const std::string& flag, const InferenceModel& m) {
  namespace fs = std::filesystem;
  std::string dir = flag;
  if (dir.empty()) {
    const fs::path src(m.source);
    const fs::path d = fs::is_directory(src) ? src : src.parent_path();
    const bool has = (fs::is_regular_file(d / "vocab.json") && fs::is_regular_file(d / "merges.txt")) ||
                     fs::is_regular_file(d / "tokenizer.json");
    if (!has) return std::nullopt;
    dir = d.empty() ? "." : d.string();
  }
  BpeTokenizer tok = BpeTokenizer::from_dir(dir);
  const int64_t V = m.model->config().vocab_size;
  if (tok.vocab_size() > V)
    throw ArgumentError({"tokenizer"}, "tokenizer " + dir + " has " + std::to_string(tok.vocab_size()) +
                                           " tokens, more than the model's vocab_size " + std::to_string(V));
  return tok;
}

}  // namespace

void register_sample(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands) {
  auto* sub = app.add_subcommand("sample", "Generate text from a checkpoint");
  struct Flags {
    std::string checkpoint;
    std::string prompt = "\n";
    GenerateOptions gen;
    int64_t n_head = 0;
    bool no_kv_cache = false;
    std::string logits_json;
    std::string tokenizer;
  };
  auto f = std::make_shared<Flags>();
  f->gen.seed = 1337;
  sub->add_option(
         "--checkpoint", f->checkpoint,
         "A checkpoint, a directory of checkpoints (the newest valid one), a .safetensors file, or a "
         "quantized model directory (mixtrain quantize)")
      ->required();
  sub->add_option("--prompt", f->prompt, "Text to continue (default: a newline)");
  sub->add_option("--tokens", f->gen.tokens, "Tokens to generate")->capture_default_str();
  sub->add_option("--temperature", f->gen.temperature, "Sampling temperature (0: greedy)")
      ->capture_default_str();
  sub->add_option("--top-k", f->gen.top_k, "Sample among the K most likely tokens (0: all)")
      ->capture_default_str();
  sub->add_option("--seed", f->gen.seed, "Seed of the sampling stream")->capture_default_str();
  sub->add_flag("--no-kv-cache", f->no_kv_cache,
                "Re-run the last block_size tokens for every new token (the reference the KV cache is "
                "checked against)");
  sub->add_option("--n-head", f->n_head,
                  "Attention heads, for a bare safetensors file without a configuration");
  sub->add_option(
      "--tokenizer", f->tokenizer,
      "A BPE tokenizer directory (vocab.json + merges.txt, or tokenizer.json) for the prompt and "
      "the output (default: the checkpoint's own, or the one beside a .safetensors file; else bytes)");
  sub->add_option(
      "--logits-json", f->logits_json,
      "Also write the prompt's fp32 logits, (T, V), as JSON to FILE (tools/check_torch_interop.py)");
  commands.push_back(
      {[sub] { return sub->parsed(); },
       [&g, f, sub] {
         apply_global_options(g);
         f->gen.kv_cache = !f->no_kv_cache;
         if (f->prompt.empty()) throw ArgumentError("--prompt must not be empty");
         auto warn = [sub](const std::string& line) {
           // The library says its fields (n_head); the user typed flags (--n-head).
           std::fprintf(stderr, "mixtrain: warning: %s\n",
                        one_line(error_message(ArgumentError({"n_head"}, line), *sub)).c_str());
         };
         if (f->gen.temperature == 0.f && f->gen.top_k > 0)
           warn("--top-k has no effect at --temperature 0 (greedy)");
         if (!f->logits_json.empty())  // never over the model it reads, nor inside a checkpoint
           check_output_path(f->logits_json, "--logits-json", {{"--checkpoint", f->checkpoint}});
         InferenceModel m = load_gpt_for_inference(f->checkpoint, f->n_head, warn);
         if (m.nonfinite_weights > 0)
           throw ArgumentError(
               "--checkpoint " + m.source + ": " + std::to_string(m.nonfinite_weights) + " of " +
               std::to_string(m.model->params().flat_params().numel()) +
               " weights are inf or NaN (the run that saved them diverged): nothing to sample");
         // A quantized model (mixtrain quantize) runs as bf16 inference around its quantized layers.
         const AutocastScope autocast(m.model->params().any_quantized(), DType::bf16);
         const std::optional<BpeTokenizer> tok = sample_tokenizer(f->tokenizer, m);
         std::vector<int32_t> prompt;
         if (tok)
           prompt = tok->encode(f->prompt);
         else
           for (unsigned char c : f->prompt) prompt.push_back(c);
         if (prompt.empty()) throw ArgumentError("--prompt encodes to no tokens");
         if (!f->logits_json.empty()) write_logits(*m.model, prompt, f->logits_json);
         // Streamed: the prompt, then each token as soon as it is drawn.
         std::fwrite(f->prompt.data(), 1, f->prompt.size(), stdout);
         std::fflush(stdout);
         f->gen.on_token = [&tok](int32_t t) {
           if (tok && t < tok->vocab_size()) {
             const std::string text = tok->decode({t});
             std::fwrite(text.data(), 1, text.size(), stdout);
           } else if (!tok && t < 256)
             std::fputc(t, stdout);
           else
             std::printf("<|%d|>", static_cast<int>(t));
           std::fflush(stdout);
         };
         generate(*m.model, prompt, f->gen);
         std::printf("\n");
         if (std::fflush(stdout) != 0 || std::ferror(stdout))
           throw IoError(std::string("cannot write the sample to stdout: ") + std::strerror(errno));
         return 0;
       }});
}

}  // namespace mixtrain::cli
