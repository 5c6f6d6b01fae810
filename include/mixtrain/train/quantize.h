// Quantized inference of a trained model (`mixtrain quantize`): its linear layers' weights and its
// embedding tables in 8 bits (tensor/quantized.h's schemes, kernels/quantize.h's definitions), the
// rest in bf16, written as a model directory that classify and evaluation load like any other;
// and the side-by-side table of fp32, bf16 and each scheme: file size, peak memory, accuracy,
// latency at batch 1, throughput at batch 64.
//
//   QuantizeResult r = quantize_model_dir("out/model", QuantScheme::int8_dynamic, "out/model-int8");
//   TextClassifier c = TextClassifier::load("out/model-int8");   // int8 GEMMs, bf16 elsewhere
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mixtrain/data/text_classification.h"
#include "mixtrain/models/model.h"
#include "mixtrain/train/classify.h"

namespace mixtrain {

// A new inference model of `model`'s family and configuration (an encoder classifier from
// load_encoder_classifier, or a Gpt) with its quantizable_parameters() quantized under `scheme`, one scale
// per output channel / table row, from its values; every other parameter rounded to `dtype`.
// ArgumentError for a family that cannot be quantized, for scheme none, and for a parameter
// holding inf or NaN (naming it: a diverged model is not quantized into one that hides it).
std::unique_ptr<Model> quantize_model(const Model& model, QuantScheme scheme, DType dtype = DType::bf16);

struct QuantizeResult {
  std::string family;  // "bert", "distilbert", "gpt"
  QuantScheme scheme = QuantScheme::none;
  int64_t quantized_elements = 0;  // parameter elements stored as codes
  int64_t other_elements = 0;      // the rest (bf16)
  int64_t file_bytes = 0;          // model.safetensors
  double seconds = 0;              // load, quantize and write
};

// Loads `dir`, a fine-tuned classifier's directory (finetune --save) or a GPT (a checkpoint, a
// directory of them, a safetensors file: load_gpt_for_inference), quantizes it and writes the
// quantized directory `output` (model.safetensors, config.json with its quantization_config, the
// classifier's tokenizer files), whole or not at all: into a temporary directory beside it,
// renamed into place. A GPT's tied output head runs as a quantized linear of wte's codes.
// IoError when `output` exists (nothing is overwritten) or cannot be written.
QuantizeResult quantize_model_dir(const std::string& dir, QuantScheme scheme, const std::string& output);

// Accuracy and mean cross-entropy of a classifier over a labelled test set (its labels must be
// the classifier's, by name; ArgumentError otherwise), in batches of `batch_size` with dynamic
// padding, each text cut to max_len tokens.
struct ClassifierEval {
  int64_t examples = 0;
  double accuracy = 0;
  double loss = 0;
};
ClassifierEval evaluate_classifier(const TextClassifier& c, const TextClassificationData& test,
                                   int64_t max_len, int64_t batch_size = 64);

// A GPT's validation loss and next-token accuracy on a byte-level corpus's validation split
// (data_path, or the built-in corpus: TextCorpus::default_corpus_path()), as train's evaluation
// scores it: windows of seq_len + 1 bytes (0: the model's block_size) in batches of batch_size,
// the first eval_batches of them (0: every one). `path` is anything load_gpt_for_inference takes,
// a quantized directory included; compute f32 or bf16 (bf16 parameters and autocast); unset: bf16
// for a quantized model, f32 otherwise.
struct LmEval {
  int64_t tokens = 0;
  double loss = 0;
  double accuracy = 0;
  DType compute = DType::f32;
  QuantScheme scheme = QuantScheme::none;
};
LmEval evaluate_lm(const std::string& path, const std::string& data_path, int64_t seq_len, int64_t batch_size,
                   int64_t eval_batches, std::optional<DType> compute = std::nullopt);

// The labelled test set of a built-in task ("finefoods", "fortunes") or a file (the model's labels).
TextClassificationData inference_test_set(const std::string& task, const std::string& test_path,
                                          const TextColumns& columns, const std::vector<std::string>& labels);

struct InferenceCompareOptions {
  std::string model_dir;           // a fine-tuned classifier (finetune --save)
  std::string task = "finefoods";  // or test_path
  std::string test_path;
  TextColumns columns;
  // The rows after fp32 and bf16 inference of model_dir itself.
  std::vector<QuantScheme> schemes = {QuantScheme::int8_dynamic, QuantScheme::int8_weight, QuantScheme::fp8};
  int64_t max_len = 128;
  int64_t test_examples = 0;       // the first N of the test set; 0: all
  int64_t latency_requests = 200;  // batch-1 requests timed (after 10 warm-up ones)
  int64_t throughput_batch = 64;
  std::string work_dir;   // where the quantized directories are written (removed after)
  void validate() const;  // ArgumentError naming the field
};

struct InferenceCompareRow {
  std::string name;          // "fp32", "bf16", "int8-dynamic", ...
  int64_t file_bytes = 0;    // model.safetensors
  int64_t peak_bytes = 0;    // tracked peak while loaded and running (weights, activations, workspace)
  int64_t weight_bytes = 0;  // parameters + quantized weights held after loading
  ClassifierEval eval;
  double latency_p50_ms = 0, latency_p99_ms = 0;  // batch 1
  // Blocks the timed batch-1 requests took from the system (after a warm-up pass over the same
  // requests, the allocator's cache serves every tensor: 0).
  int64_t system_allocations = 0;
  double throughput = 0;  // examples/s at throughput_batch
  std::string gemm;       // how its GEMMs run here
};

// Runs every row one after the other (nothing else should run: it times), calling on_row after each.
std::vector<InferenceCompareRow> compare_inference(
    const InferenceCompareOptions& o, const std::function<void(const InferenceCompareRow&)>& on_row = {});

}  // namespace mixtrain
