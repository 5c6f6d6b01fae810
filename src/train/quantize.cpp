// Quantized inference (train/quantize.h): quantizing a model, writing its directory, evaluating a
// classifier, and the fp32 / bf16 / quantized comparison.
#include "mixtrain/train/quantize.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "checkpoint/gpt_weights.h"
#include "checkpoint/quantized_io.h"
#include "core/file_io.h"
#include "mixtrain/amp/autocast.h"
#include "mixtrain/autograd/variable.h"
#include "mixtrain/checkpoint/load_model.h"
#include "mixtrain/core/error.h"
#include "mixtrain/data/data_source.h"
#include "mixtrain/data/text_corpus.h"
#include "mixtrain/kernels/gemm_info.h"
#include "mixtrain/kernels/quantize.h"
#include "mixtrain/models/encoder.h"
#include "mixtrain/models/gpt.h"
#include "mixtrain/tensor/allocator.h"
#include "mixtrain/tensor/memory.h"
#include "models/encoder_model.h"

namespace mixtrain {
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// dst's parameters from src's (the same names): quantized ones through quantize_rows, the rest
// rounded into dst's dtype.
void quantize_into(const ParameterStore& src, ParameterStore& dst) {
  for (size_t i = 0; i < dst.size(); ++i) {
    const std::string& name = dst.infos()[i].name;
    const Tensor from = src.param(src.index(name));
    if (!dst.is_quantized(i)) {
      dst.param(i).copy_from(from);
      continue;
    }
    QuantizedTensor q = dst.quantized(i);
    quantize_rows(from, q.codes, q.scale);
    const float* s = q.scale.data<float>();
    int64_t bad = 0;
    for (int64_t r = 0; r < q.scale.numel(); ++r) bad += std::isnan(s[r]) ? 1 : 0;
    if (bad)
      throw ArgumentError("quantize: parameter '" + name + "' has " + std::to_string(bad) +
                          " rows holding inf or NaN (a diverged model): nothing was quantized");
  }
  dst.mark_written();
}

// A quantized GPT's directory: model.safetensors (codes, scales, bf16 rest; its configuration
// and scheme in the metadata) and Hugging Face's GPT-2 config.json with the quantization_config;
// and the tokenizer files (vocab.json, merges.txt, tokenizer.json) of the model it came from,
// those in `tokenizer_dir` (a checkpoint, or a model file's directory), so that it samples as text.
void save_quantized_gpt(const Gpt& q, const std::string& dir, const std::string& tokenizer_dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError("cannot create model directory " + dir + ": " + ec.message());
  SafetensorsWriter w = model_safetensors_writer(q);
  w.set_metadata("mixtrain_config", q.config().to_json_text());
  w.set_metadata("mixtrain_quant_scheme", std::string(quant_scheme_name(q.params().quant_scheme())));
  w.write((fs::path(dir) / "model.safetensors").string());
  // The end-of-text id (config.json's bos/eos) from the tokenizer that comes along, if any.
  std::vector<uint8_t> vocab;
  if (!tokenizer_dir.empty() && fs::is_regular_file(fs::path(tokenizer_dir) / "vocab.json"))
    vocab = read_file_bounded((fs::path(tokenizer_dir) / "vocab.json").string(), uint64_t{1} << 30,
                              "tokenizer file");
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(
      gpt2_hf_config_json(q.config(), {reinterpret_cast<const char*>(vocab.data()), vocab.size()}));
  config["quantization_config"] = quantization_config_json(q.params().quant_scheme(), {});
  write_file_durable((fs::path(dir) / "config.json").string(), config.dump(2) + "\n");
  copy_present_files(tokenizer_dir, dir, {"vocab.json", "merges.txt", "tokenizer.json"}, uint64_t{1} << 30,
                     "tokenizer file");
}

}  // namespace

std::unique_ptr<Model> quantize_model(const Model& model, QuantScheme scheme, DType dtype) {
  if (scheme == QuantScheme::none)
    throw ArgumentError({"scheme"}, "quantize: scheme 'none' quantizes nothing");
  if (model.params().any_quantized()) throw ArgumentError("quantize: the model is quantized already");
  StoreOptions storage;
  storage.quant = scheme;
  storage.gradients = false;
  std::unique_ptr<Model> q;
  if (const auto* enc = dynamic_cast<const EncoderClassifier*>(&model))
    q = std::make_unique<EncoderClassifier>(enc->config(), enc->options(), dtype, DType::f32,
                                            MemCategory::parameters, storage);
  else if (const auto* gpt = dynamic_cast<const Gpt*>(&model))
    q = std::make_unique<Gpt>(gpt->config(), 0, dtype, DType::f32, MemCategory::parameters, storage);
  else
    throw ArgumentError("quantize: a " + std::string(model.family()) +
                        " model cannot be quantized (GPTs and encoder classifiers can)");
  quantize_into(model.params(), q->params());
  return q;
}

QuantizeResult quantize_model_dir(const std::string& dir, QuantScheme scheme, const std::string& output) {
  const Clock::time_point t0 = Clock::now();
  std::error_code ec;
  if (output.empty()) throw ArgumentError({"output"}, "output must name a directory");
  if (fs::exists(output, ec))
    throw IoError("output " + output + " exists: nothing is overwritten (name a new directory)");
  if (!fs::exists(dir, ec)) throw IoError("model " + dir + " does not exist");
  // A fine-tuned classifier's directory (finetune --save: config.json and vocab.txt), else a GPT
  // (a checkpoint, a directory of them, or a safetensors file: load_gpt_for_inference).
  const bool classifier = fs::is_directory(dir, ec) &&
                          fs::is_regular_file(fs::path(dir) / "config.json", ec) &&
                          fs::is_regular_file(fs::path(dir) / "vocab.txt", ec);
  std::unique_ptr<Model> model;
  std::string tokenizer_dir;  // a GPT's: where its tokenizer files are, if it has them
  if (classifier) {
    if (is_quantized_model_dir(dir))
      throw IoError(dir + " holds a quantized model already: quantize the model it came from");
    const ClassifierOptions co = saved_classifier_options(dir);
    if (co.labels.size() < 2)
      throw IoError(
          dir + "/config.json: no id2label with at least 2 labels (not a model saved by finetune --save)");
    model = load_encoder_classifier(dir, co, DType::f32, DType::f32, MemCategory::parameters,
                                    /*gradients=*/false);
  } else {
    InferenceModel m = load_gpt_for_inference(dir, 0, {});
    if (m.model->params().any_quantized())
      throw IoError(dir + " holds a quantized model already: quantize the model it came from");
    if (m.nonfinite_weights > 0)
      throw ArgumentError("quantize: " + m.source + " holds " + std::to_string(m.nonfinite_weights) +
                          " weights that are inf or NaN (a diverged run): nothing was quantized");
    tokenizer_dir = fs::is_directory(m.source, ec) ? m.source : fs::path(m.source).parent_path().string();
    model = std::move(m.model);
  }
  const std::unique_ptr<Model> q = quantize_model(*model, scheme);
  QuantizeResult r;
  r.family = std::string(q->family());
  r.scheme = scheme;
  for (const ParamInfo& p : q->params().infos())
    (p.quantized ? r.quantized_elements : r.other_elements) += p.numel;
  // Whole or not at all: written beside `output` under a temporary name, then renamed.
  const fs::path out = fs::absolute(output);
  const fs::path tmp =
      out.parent_path() / (out.filename().string() + ".partial-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  try {
    if (classifier)
      save_encoder_classifier(*q, tmp.string(), dir);
    else
      save_quantized_gpt(static_cast<const Gpt&>(*q), tmp.string(), tokenizer_dir);
    fs::rename(tmp, out, ec);
    if (ec) throw IoError("cannot move " + tmp.string() + " to " + out.string() + ": " + ec.message());
    fsync_directory(out.parent_path().string());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  r.file_bytes = static_cast<int64_t>(fs::file_size(out / "model.safetensors", ec));
  r.seconds = seconds_since(t0);
  return r;
}

LmEval evaluate_lm(const std::string& path, const std::string& data_path, int64_t seq_len, int64_t batch_size,
                   int64_t eval_batches, std::optional<DType> compute) {
  if (batch_size < 1) throw ArgumentError({"batch_size"}, "batch_size must be positive");
  if (seq_len < 0 || eval_batches < 0)
    throw ArgumentError({"seq_len"}, "seq_len and eval_batches must be >= 0");
  if (compute && *compute != DType::f32 && *compute != DType::bf16)
    throw ArgumentError({"compute"}, "compute must be f32 or bf16");
  InferenceModel m = load_gpt_for_inference(path, 0, {});
  if (m.nonfinite_weights > 0)
    throw ArgumentError(m.source + ": " + std::to_string(m.nonfinite_weights) + " weights are inf or NaN");
  LmEval r;
  r.scheme = m.model->params().quant_scheme();
  r.compute = compute.value_or(r.scheme == QuantScheme::none ? DType::f32 : DType::bf16);
  std::unique_ptr<Gpt> model = std::move(m.model);
  if (r.compute == DType::bf16 && r.scheme == QuantScheme::none) {  // bf16 parameters, as a quantized model's
    StoreOptions inference;
    inference.gradients = false;
    auto b = std::make_unique<Gpt>(model->config(), 0, DType::bf16, DType::f32, MemCategory::parameters,
                                   inference);
    for (size_t i = 0; i < b->params().size(); ++i) b->params().param(i).copy_from(model->params().param(i));
    b->params().flat_params().storage()->bump_version();
    model = std::move(b);
  }
  const TextCorpus corpus =
      TextCorpus::load(data_path.empty() ? TextCorpus::default_corpus_path() : data_path);
  const int64_t T = seq_len > 0 ? seq_len : model->config().block_size;
  const LmWindows windows(corpus, batch_size, T, 0);
  const int64_t n =
      eval_batches > 0 ? std::min(eval_batches, windows.num_eval_batches()) : windows.num_eval_batches();
  EvalSums sums;
  const autograd::NoGradGuard no_grad;
  const AutocastScope autocast(r.compute == DType::bf16, DType::bf16);
  for (int64_t i = 0; i < n; ++i) {
    Batch b;
    windows.eval_batch(i, b);
    sums.add(model->evaluate_batch(b));
  }
  r.tokens = sums.scored;
  r.loss = sums.rows ? sums.loss_sum / double(sums.rows) : 0;
  r.accuracy = sums.scored ? double(sums.correct) / double(sums.scored) : 0;
  return r;
}

TextClassificationData inference_test_set(const std::string& task, const std::string& test_path,
                                          const TextColumns& columns,
                                          const std::vector<std::string>& labels) {
  if (!test_path.empty()) return TextClassificationData::load(test_path, columns, &labels);
  TextClassificationTask t;
  if (task == "finefoods")
    t = finefoods_task();
  else if (task == "fortunes")
    t = fortunes_topic_task();
  else
    throw ArgumentError({"task"}, "task must be finefoods or fortunes, got '" + task + "'");
  if (t.train.labels != labels) {
    std::string m, l;
    for (const std::string& s : labels) m += (m.empty() ? "" : ", ") + s;
    for (const std::string& s : t.train.labels) l += (l.empty() ? "" : ", ") + s;
    throw ArgumentError({"task"}, "the model's labels (" + m + ") are not task " + task + "'s (" + l + ")");
  }
  return t.test;
}

namespace {

// The test set as classification batches of `batch` rows (the last one short).
std::vector<Batch> make_batches(const TextClassifier& c, const TextClassificationData& test, int64_t max_len,
                                int64_t batch, std::vector<int32_t>& targets) {
  std::vector<Batch> out;
  const WordPieceTokenizer& tok = c.tokenizer();
  for (size_t first = 0; first < test.examples.size(); first += size_t(batch)) {
    const size_t end = std::min(test.examples.size(), first + size_t(batch));
    std::vector<Encoding> enc;
    for (size_t i = first; i < end; ++i) {
      const TextExample& e = test.examples[i];
      enc.push_back(e.text_pair.empty() ? tok.encode(e.text, max_len)
                                        : tok.encode_pair(e.text, e.text_pair, max_len));
      targets.push_back(e.label);
    }
    out.push_back(c.batch(enc));
  }
  return out;
}

// Accuracy and loss from the logits of `batches` (targets in order); `forward_s` the time in the
// forward passes alone.
ClassifierEval score(const TextClassifier& c, const std::vector<Batch>& batches,
                     const std::vector<int32_t>& targets, double* forward_s) {
  ClassifierEval e;
  const int64_t K = int64_t(c.labels().size());
  double loss = 0, t = 0;
  int64_t correct = 0;
  size_t row = 0;
  for (const Batch& b : batches) {
    const Clock::time_point t0 = Clock::now();
    const std::vector<float> z = c.logits(b);
    t += seconds_since(t0);
    for (int64_t r = 0; r < b.rows; ++r, ++row) {
      const float* x = z.data() + r * K;
      const float top = *std::max_element(x, x + K);
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += std::exp(double(x[k]) - top);
      loss += std::log(sum) + top - double(x[targets[row]]);
      correct += (std::max_element(x, x + K) - x) == targets[row] ? 1 : 0;
    }
  }
  e.examples = int64_t(row);
  e.accuracy = row ? double(correct) / double(row) : 0;
  e.loss = row ? loss / double(row) : 0;
  if (forward_s) *forward_s = t;
  return e;
}

}  // namespace

ClassifierEval evaluate_classifier(const TextClassifier& c, const TextClassificationData& test,
                                   int64_t max_len, int64_t batch_size) {
  if (batch_size < 1) throw ArgumentError({"batch_size"}, "batch_size must be positive");
  if (test.labels != c.labels()) throw ArgumentError("evaluate: the test set's labels are not the model's");
  std::vector<int32_t> targets;
  const std::vector<Batch> batches = make_batches(c, test, max_len, batch_size, targets);
  return score(c, batches, targets, nullptr);
}

void InferenceCompareOptions::validate() const {
  if (model_dir.empty())
    throw ArgumentError({"model_dir"}, "model_dir must name a fine-tuned model directory");
  if (max_len < 3) throw ArgumentError({"max_len"}, "max_len must be at least 3");
  if (latency_requests < 1) throw ArgumentError({"latency_requests"}, "latency_requests must be positive");
  if (throughput_batch < 1) throw ArgumentError({"throughput_batch"}, "throughput_batch must be positive");
  if (test_examples < 0) throw ArgumentError({"test_examples"}, "test_examples must be >= 0");
  if (work_dir.empty())
    throw ArgumentError({"work_dir"}, "work_dir must name a directory for the quantized models");
}

namespace {
std::string gemm_route(const std::string& name) {
  if (name == "fp32") return gemm_impl_name(DType::f32);
  if (name == "bf16") return gemm_impl_name(DType::bf16);
  if (name == "int8-dynamic") return gemm_s8_route();
  if (name == "int8-weight") return "int8 dequantized to bf16, then " + gemm_impl_name(DType::bf16);
  return "E4M3 codes as bf16, then " + gemm_impl_name(DType::bf16);
}
}  // namespace

std::vector<InferenceCompareRow> compare_inference(
    const InferenceCompareOptions& o, const std::function<void(const InferenceCompareRow&)>& on_row) {
  o.validate();
  const ClassifierOptions co = saved_classifier_options(o.model_dir);
  TextClassificationData test = inference_test_set(o.task, o.test_path, o.columns, co.labels);
  if (o.test_examples > 0 && int64_t(test.examples.size()) > o.test_examples)
    test.examples.resize(size_t(o.test_examples));
  if (test.examples.empty()) throw ArgumentError("compare: the test set is empty");
  struct Source {
    std::string name, dir;
    DType compute;
  };
  std::vector<Source> sources = {{"fp32", o.model_dir, DType::f32}, {"bf16", o.model_dir, DType::bf16}};
  std::error_code ec;
  fs::create_directories(o.work_dir, ec);
  if (ec) throw IoError("cannot create " + o.work_dir + ": " + ec.message());
  for (QuantScheme s : o.schemes) {
    const std::string name(quant_scheme_name(s));
    const std::string dir = (fs::path(o.work_dir) / name).string();
    fs::remove_all(dir, ec);
    quantize_model_dir(o.model_dir, s, dir);
    sources.push_back({name, dir, DType::bf16});
  }
  std::vector<InferenceCompareRow> rows;
  for (const Source& src : sources) {
    InferenceCompareRow row;
    row.name = src.name;
    row.file_bytes = static_cast<int64_t>(fs::file_size(fs::path(src.dir) / "model.safetensors", ec));
    MemoryTracker& mem = MemoryTracker::global();
    const int64_t live0 = mem.snapshot().live_total;
    mem.reset_peaks();
    {
      const TextClassifier c = TextClassifier::load(src.dir, src.compute);
      row.weight_bytes = mem.snapshot().live_total - live0;
      std::vector<int32_t> targets;
      const std::vector<Batch> batches = make_batches(c, test, o.max_len, o.throughput_batch, targets);
      double forward_s = 0;
      row.eval = score(c, batches, targets, &forward_s);
      row.throughput = forward_s > 0 ? double(row.eval.examples) / forward_s : 0;
      // Batch 1: the first requests of the test set, in turn (10 warm-up ones untimed).
      std::vector<int32_t> one_targets;
      TextClassificationData few;  // the first requests only (not a copy of the whole set)
      few.labels = test.labels;
      few.examples.assign(test.examples.begin(),
                          test.examples.begin() + std::min(test.examples.size(), size_t(o.latency_requests)));
      const std::vector<Batch> ones = make_batches(c, few, o.max_len, 1, one_targets);
      for (const Batch& b : ones) c.logits(b);  // warm-up: every request once (the allocator's cache)
      std::vector<double> ms;
      const int64_t alloc0 = cpu_allocator_stats().system_allocations;
      for (int64_t i = 0; i < o.latency_requests; ++i) {
        const Clock::time_point t0 = Clock::now();
        c.logits(ones[size_t(i) % ones.size()]);
        ms.push_back(seconds_since(t0) * 1e3);
      }
      row.system_allocations = cpu_allocator_stats().system_allocations - alloc0;
      std::sort(ms.begin(), ms.end());
      const auto pct = [&](double p) {  // nearest rank
        const double rank = std::ceil(p * double(ms.size()));
        return ms[size_t(std::clamp(rank - 1, 0.0, double(ms.size() - 1)))];
      };
      row.latency_p50_ms = pct(0.5);
      row.latency_p99_ms = pct(0.99);
      row.gemm = gemm_route(src.name);
    }
    row.peak_bytes = mem.snapshot().peak_total - live0;
    if (on_row) on_row(row);
    rows.push_back(row);
  }
  for (QuantScheme s : o.schemes)
    fs::remove_all(fs::path(o.work_dir) / std::string(quant_scheme_name(s)), ec);
  return rows;
}

}  // namespace mixtrain
