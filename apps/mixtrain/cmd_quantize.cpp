// `mixtrain quantize`: writes a fine-tuned classifier's quantized model directory, or (--compare)
// prints fp32, bf16 and each scheme side by side; `mixtrain evaluate`: a classifier's test
// accuracy and loss (train/quantize.h).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "mixtrain/kernels/threads.h"
#include "mixtrain/train/quantize.h"

namespace mixtrain::cli {
namespace {

std::vector<QuantScheme> parse_schemes(const std::string& list) {
  std::vector<QuantScheme> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    out.push_back(parse_quant_scheme(list.substr(start, end - start)));
    start = end + 1;
  }
  return out;
}

nlohmann::ordered_json row_json(const InferenceCompareRow& r) {
  nlohmann::ordered_json j;
  j["name"] = r.name;
  j["file_bytes"] = r.file_bytes;
  j["weight_bytes"] = r.weight_bytes;
  j["peak_bytes"] = r.peak_bytes;
  j["test_accuracy"] = finite_or_null(r.eval.accuracy);
  j["test_loss"] = finite_or_null(r.eval.loss);
  j["test_examples"] = r.eval.examples;
  j["latency_p50_ms"] = r.latency_p50_ms;
  j["latency_p99_ms"] = r.latency_p99_ms;
  j["system_allocations"] = r.system_allocations;
  j["throughput_examples_per_s"] = r.throughput;
  j["gemm"] = r.gemm;
  return j;
}

}  // namespace

void register_quantize(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands) {
  auto* sub = app.add_subcommand(
      "quantize", "Quantize a fine-tuned classifier for inference (int8 or fp8), or compare the schemes");
  struct Flags {
    std::string checkpoint, output, scheme, schemes = "int8-dynamic,int8-weight,fp8", task = "finefoods",
                                            test;
    bool compare = false;
    int64_t max_len = 128, test_examples = 0, requests = 200, batch = 64;
    std::string json;
  };
  auto f = std::make_shared<Flags>();
  sub->add_option("--checkpoint", f->checkpoint, "The fine-tuned model directory (finetune --save DIR)")
      ->required();
  sub->add_option("--scheme", f->scheme,
                  "int8-dynamic (int8 weights per channel, activations per token, int8 GEMMs), int8-weight "
                  "(weights only, dequantized into bf16 GEMMs) or fp8 (E4M3 weights and activations)");
  sub->add_option("--output", f->output, "Write the quantized model directory here (must not exist)");
  sub->add_flag("--compare", f->compare,
                "Instead: fp32, bf16 and each of --schemes side by side (file size, peak memory, test "
                "accuracy, batch-1 latency p50/p99, throughput at --batch)");
  sub->add_option("--schemes", f->schemes, "--compare: the schemes, comma-separated")->capture_default_str();
  sub->add_option("--task", f->task, "--compare: the built-in test set (finefoods or fortunes)")
      ->capture_default_str();
  sub->add_option("--test", f->test,
                  "--compare: a labelled test file (.tsv/.csv/.jsonl, columns text and label)");
  sub->add_option("--test-examples", f->test_examples, "--compare: the first N test examples (0: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  sub->add_option("--requests", f->requests, "--compare: batch-1 requests timed")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}))
      ->capture_default_str();
  sub->add_option("--batch", f->batch, "--compare: the throughput batch size")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}))
      ->capture_default_str();
  sub->add_option("--max-len", f->max_len, "--compare: tokens per text with [CLS]/[SEP]")
      ->check(CLI::Range(int64_t{3}, int64_t{1} << 20))
      ->capture_default_str();
  add_json_option(sub, f->json, "The result");
  commands.push_back(
      {[sub] { return sub->parsed(); },
       [&g, f, sub] {
         apply_global_options(g);
         const std::string json = json_output(*sub, f->json);
         if (!json.empty() && json != "-") check_output_path(json, "--json");
         if (f->compare) {
           if (!f->output.empty() || !f->scheme.empty())
             throw ArgumentError("--compare takes --schemes, not --scheme or --output");
           InferenceCompareOptions o;
           o.model_dir = f->checkpoint;
           o.task = f->test.empty() ? f->task : "";
           o.test_path = f->test;
           o.schemes = parse_schemes(f->schemes);
           o.max_len = f->max_len;
           o.test_examples = f->test_examples;
           o.latency_requests = f->requests;
           o.throughput_batch = f->batch;
           o.work_dir = (std::filesystem::temp_directory_path() /
                         ("mixtrain-quantize-compare-" + std::to_string(::getpid())))
                            .string();
           const bool quiet = json == "-";
           if (!quiet)
             std::printf("%-13s %9s %9s %9s %9s %8s %8s %8s %10s  %s\n", "", "file MiB", "weights",
                         "peak MiB", "accuracy", "loss", "p50 ms", "p99 ms", "ex/s", "GEMMs");
           nlohmann::ordered_json rows = nlohmann::ordered_json::array();
           compare_inference(o, [&](const InferenceCompareRow& r) {
             rows.push_back(row_json(r));
             if (quiet) return;
             std::printf("%-13s %9.2f %9.2f %9.2f %9.4f %8.4f %8.2f %8.2f %10.1f  %s\n", r.name.c_str(),
                         mib(r.file_bytes), mib(r.weight_bytes), mib(r.peak_bytes), r.eval.accuracy,
                         r.eval.loss, r.latency_p50_ms, r.latency_p99_ms, r.throughput, r.gemm.c_str());
             std::fflush(stdout);
           });
           std::error_code ec;
           std::filesystem::remove_all(o.work_dir, ec);
           if (!json.empty()) {
             nlohmann::ordered_json j;
             j["model"] = f->checkpoint;
             j["test"] = f->test.empty() ? f->task : f->test;
             j["threads"] = num_threads();
             j["batch"] = f->batch;
             j["requests"] = f->requests;
             j["rows"] = rows;
             write_file_atomic(json, j.dump(2) + "\n");
           }
           return 0;
         }
         if (f->scheme.empty() || f->output.empty())
           throw ArgumentError("quantize needs --scheme and --output (or --compare)");
         const QuantScheme s = parse_quant_scheme(f->scheme);
         // An existing --output (the checkpoint itself included) is refused by quantize_model_dir.
         const QuantizeResult r = quantize_model_dir(f->checkpoint, s, f->output);
         if (json != "-")
           std::printf(
               "quantized %s (%s) to %s in %.2f s: %lld elements as codes, %lld in bf16; "
               "%s/model.safetensors %.2f MiB\n",
               f->checkpoint.c_str(), r.family.c_str(), f->scheme.c_str(), r.seconds,
               static_cast<long long>(r.quantized_elements), static_cast<long long>(r.other_elements),
               f->output.c_str(), mib(r.file_bytes));
         if (!json.empty()) {
           nlohmann::ordered_json j;
           j["model"] = f->checkpoint;
           j["output"] = f->output;
           j["family"] = r.family;
           j["scheme"] = f->scheme;
           j["quantized_elements"] = r.quantized_elements;
           j["other_elements"] = r.other_elements;
           j["file_bytes"] = r.file_bytes;
           j["seconds"] = r.seconds;
           write_file_atomic(json, j.dump(2) + "\n");
         }
         return 0;
       }});

  auto* ev =
      app.add_subcommand("evaluate", "Test accuracy and loss of a fine-tuned (or quantized) classifier");
  struct EvalFlags {
    std::string checkpoint, task = "finefoods", test, dtype, json, data;
    int64_t max_len = 128, batch = 64, test_examples = 0, seq_len = 0, eval_batches = 0;
  };
  auto e = std::make_shared<EvalFlags>();
  ev->add_option(
        "--checkpoint", e->checkpoint,
        "A classifier directory (finetune --save), a GPT (checkpoint, directory of them, safetensors "
        "file), or either quantized (mixtrain quantize)")
      ->required();
  ev->add_option("--data", e->data,
                 "GPT: the corpus whose validation split is scored (default: the built-in one)");
  ev->add_option("--seq-len", e->seq_len, "GPT: tokens per window (0: the model's block_size)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  ev->add_option("--eval-batches", e->eval_batches, "GPT: the first N validation batches (0: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  ev->add_option("--task", e->task, "The built-in test set (finefoods or fortunes)")->capture_default_str();
  ev->add_option("--test", e->test,
                 "A labelled test file instead (.tsv/.csv/.jsonl, columns text and label)");
  ev->add_option("--test-examples", e->test_examples, "The first N test examples (0: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  ev->add_option("--dtype", e->dtype, "f32 or bf16 (default: bf16 for a quantized model, f32 otherwise)");
  ev->add_option("--max-len", e->max_len, "Tokens per text with [CLS]/[SEP]")
      ->check(CLI::Range(int64_t{3}, int64_t{1} << 20))
      ->capture_default_str();
  ev->add_option("--batch-size", e->batch, "Texts (or GPT windows) per forward pass")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}))
      ->capture_default_str();
  add_json_option(ev, e->json, "The result");
  commands.push_back(
      {[ev] { return ev->parsed(); },
       [&g, e, ev] {
         apply_global_options(g);
         const std::string json = json_output(*ev, e->json);
         if (!json.empty() && json != "-") check_output_path(json, "--json");
         std::optional<DType> dt;
         if (!e->dtype.empty()) dt = parse_dtype(e->dtype);
         namespace fs = std::filesystem;
         std::error_code ec;
         const bool classifier = fs::is_regular_file(fs::path(e->checkpoint) / "vocab.txt", ec);
         if (!classifier) {
           const LmEval r = evaluate_lm(e->checkpoint, e->data, e->seq_len, e->batch, e->eval_batches, dt);
           const std::string scheme(quant_scheme_name(r.scheme));
           if (json != "-")
             std::printf("%s (%s%s): validation loss %.4f, next-token accuracy %.4f over %lld tokens\n",
                         e->checkpoint.c_str(), std::string(dtype_name(r.compute)).c_str(),
                         r.scheme == QuantScheme::none ? "" : (", " + scheme).c_str(), r.loss, r.accuracy,
                         static_cast<long long>(r.tokens));
           if (!json.empty()) {
             nlohmann::ordered_json j;
             j["model"] = e->checkpoint;
             j["dtype"] = std::string(dtype_name(r.compute));
             j["scheme"] = scheme;
             j["val_tokens"] = r.tokens;
             j["val_loss"] = finite_or_null(r.loss);
             j["val_accuracy"] = finite_or_null(r.accuracy);
             write_file_atomic(json, j.dump(2) + "\n");
           }
           return 0;
         }
         const TextClassifier c = TextClassifier::load(e->checkpoint, dt);
         TextClassificationData test =
             inference_test_set(e->test.empty() ? e->task : "", e->test, TextColumns{}, c.labels());
         if (e->test_examples > 0 && int64_t(test.examples.size()) > e->test_examples)
           test.examples.resize(size_t(e->test_examples));
         const ClassifierEval r = evaluate_classifier(c, test, e->max_len, e->batch);
         const std::string scheme(quant_scheme_name(c.quant_scheme()));
         if (json != "-")
           std::printf("%s (%s%s): test accuracy %.4f, loss %.4f over %lld examples\n", e->checkpoint.c_str(),
                       std::string(dtype_name(c.compute_dtype())).c_str(),
                       c.quant_scheme() == QuantScheme::none ? "" : (", " + scheme).c_str(), r.accuracy,
                       r.loss, static_cast<long long>(r.examples));
         if (!json.empty()) {
           nlohmann::ordered_json j;
           j["model"] = e->checkpoint;
           j["dtype"] = std::string(dtype_name(c.compute_dtype()));
           j["scheme"] = scheme;
           j["test"] = e->test.empty() ? e->task : e->test;
           j["test_examples"] = r.examples;
           j["test_accuracy"] = finite_or_null(r.accuracy);
           j["test_loss"] = finite_or_null(r.loss);
           write_file_atomic(json, j.dump(2) + "\n");
         }
         return 0;
       }});
}

}  // namespace mixtrain::cli
