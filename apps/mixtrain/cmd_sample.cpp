// `mixtrain sample`: generates text from a checkpoint (or a GPT-2 layout safetensors file).
// Tokens are bytes (the models mixtrain trains); ids past 255 (a GPT-2 BPE vocabulary, which
// mixtrain does not tokenize) print as <|id|>.
#include <cstdio>
#include <string>

#include "commands.h"
#include "mixtrain/checkpoint/load_model.h"
#include "mixtrain/models/generate.h"

namespace mixtrain::cli {

void register_sample(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands) {
  auto* sub = app.add_subcommand("sample", "Generate text from a checkpoint");
  struct Flags {
    std::string checkpoint;
    std::string prompt = "\n";
    GenerateOptions gen;
    int64_t n_head = 0;
  };
  auto f = std::make_shared<Flags>();
  f->gen.seed = 1337;
  sub->add_option("--checkpoint", f->checkpoint,
                  "A checkpoint, a directory of checkpoints (the newest valid one), or a .safetensors file")
      ->required();
  sub->add_option("--prompt", f->prompt, "Text to continue (default: a newline)");
  sub->add_option("--tokens", f->gen.tokens, "Tokens to generate")->capture_default_str();
  sub->add_option("--temperature", f->gen.temperature, "Sampling temperature (0: greedy)")->capture_default_str();
  sub->add_option("--top-k", f->gen.top_k, "Sample among the K most likely tokens (0: all)")->capture_default_str();
  sub->add_option("--seed", f->gen.seed, "Seed of the sampling stream")->capture_default_str();
  sub->add_option("--n-head", f->n_head, "Attention heads, for a bare safetensors file without a configuration");
  commands.push_back({[sub] { return sub->parsed(); }, [&g, f] {
                        apply_global_options(g);
                        if (f->prompt.empty()) throw ArgumentError("--prompt must not be empty");
                        auto warn = [](const std::string& line) {
                          std::fprintf(stderr, "mixtrain: warning: %s\n", line.c_str());
                        };
                        InferenceModel m = load_gpt_for_inference(f->checkpoint, f->n_head, warn);
                        std::vector<int32_t> prompt;
                        for (unsigned char c : f->prompt) prompt.push_back(c);
                        const std::vector<int32_t> out = generate(*m.model, prompt, f->gen);
                        std::string text = f->prompt;
                        for (int32_t t : out) {
                          if (t < 256) text.push_back(static_cast<char>(t));
                          else text += "<|" + std::to_string(t) + "|>";
                        }
                        std::fwrite(text.data(), 1, text.size(), stdout);
                        std::printf("\n");
                        return 0;
                      }});
}

}  // namespace mixtrain::cli
